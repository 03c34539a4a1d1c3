"""What became of a call to the outside world, and how long pending work keeps trying. No I/O.

A **transient** failure may succeed if the same request is sent again, with the same idempotency
key: a timeout or a connection error (the call may even have been done), any 5xx, and the 4xx
that mean "not now" (408 Request Timeout, 409 a request with this key still in progress, 425 Too
Early, 429 Too Many Requests). Every other 4xx is **permanent**: the other side understood the
request and refused it, and sending it again gets the same answer. So transient failures are
retried with backoff up to a maximum age, and a permanent one ends the work at once: both end
parked, with their reason, for an operator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the two callers' types: a process that makes no call does not load httpx
    import httpx

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


class Kind(StrEnum):
    DONE = "done"
    TRANSIENT = "transient"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class CallResult:
    kind: Kind
    status: int | None
    """The HTTP status, or None when no answer came."""
    reason: str
    """What happened, short enough for a row and a log line."""

    @property
    def told(self) -> str:
        """What the timeline shows for this call."""
        word = {Kind.DONE: "", Kind.TRANSIENT: ", will retry", Kind.PERMANENT: ", refused for good"}[self.kind]
        return f"{self.reason}{word}"


def classify_status(status: int) -> Kind:
    """2xx is done; 5xx and the "not now" 4xx are transient; anything else is a refusal."""
    if 200 <= status < 300:
        return Kind.DONE
    if status >= 500 or status in TRANSIENT_STATUSES:
        return Kind.TRANSIENT
    return Kind.PERMANENT


def of_response(response: httpx.Response) -> CallResult:
    detail = _detail(response)
    return CallResult(
        classify_status(response.status_code), response.status_code, f"HTTP {response.status_code}{detail}"
    )


def of_error(error: httpx.HTTPError) -> CallResult:
    """No answer (a timeout, a refused or dropped connection): maybe done, so always transient."""
    return CallResult(Kind.TRANSIENT, None, f"{type(error).__name__}: {str(error)[:200]}".rstrip(": "))


def _detail(response: httpx.Response) -> str:
    if response.status_code < 300:
        return ""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    nested = error if isinstance(error, dict) else {}
    message = nested.get("message") or nested.get("code") or (None if nested else error) or body.get("detail")
    return f" ({str(message)[:200]})" if message else ""


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff with full jitter between tries, and the age at which transient failures give up."""

    first_delay_seconds: float = 0.5
    max_delay_seconds: float = 30.0
    max_age_seconds: float = 300.0

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds until the next try after `failures` failed ones: random in [half, all] of the
        capped exponential, so retries spread out but never come back at once."""
        ceiling = min(self.max_delay_seconds, self.first_delay_seconds * 2 ** max(0, failures - 1))
        return (rng or random).uniform(ceiling / 2, ceiling)

    def why_parked(self, result: CallResult, service: str) -> str:
        """The reason a parked row and its failure event carry: a refusal, or the maximum age."""
        if result.kind is Kind.PERMANENT:
            return f"refused by {service}: {result.reason}"[:500]
        return f"{service} failed for {self.max_age_seconds:g} s: {result.reason}"[:500]

    def gives_up(self, retrying_since: datetime, now: datetime) -> bool:
        """True when the work has been retried for longer than the maximum age."""
        return now - retrying_since >= timedelta(seconds=self.max_age_seconds)
