"""The saga's field limits, defined once: what the orders API accepts, every service downstream
accepts too. The API's request models, the events' payload models (services/saga_contract.py) and
the sandboxes' request models are all built from these types, so a value cannot pass the first
door and be refused at the third. No I/O here.

Text is strict everywhere: a str (never a number coerced), valid Unicode (no lone UTF-16
surrogate, which cannot be encoded as UTF-8), and no control characters (NUL included, which
PostgreSQL cannot store); only a message body may hold tabs and line breaks.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, JsonValue, StringConstraints

MAX_LINES = 20
MAX_QUANTITY = 100
MAX_AMOUNT_CENTS = 100_000_000
"""What one charge may be; the API's largest possible order stays below it (a unit test checks)."""
MAX_EMAIL_LENGTH = 254
"""RFC 5321: a path is at most 256 octets with its angle brackets, so an address at most 254."""
MAX_LOCAL_PART = 64
MAX_DOMAIN = 253
MAX_LABEL = 63
MAX_KEY_LENGTH = 255
MAX_SUBJECT = 200
MAX_BODY = 20_000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LOCAL_PART = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (it holds a lone UTF-16 surrogate)") from None
    return text


def _single_line(text: str) -> str:
    if _CONTROL.search(_encodable(text)):
        raise ValueError("text must not hold control characters (NUL, line breaks, escapes)")
    return text


def _multi_line(text: str) -> str:
    if _CONTROL_BUT_LINES.search(_encodable(text)):
        raise ValueError("text must not hold control characters other than tabs and line breaks")
    return text


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank")
    return text


def email_problem(address: str) -> str | None:
    """Why `address` is not one every service of the saga accepts, or None.

    The form is RFC 5322's dot-atom on both sides of the @ (no quoted local parts, no address
    literals, ASCII only: the subset every mail system takes), with RFC 5321's lengths: local
    part 64, domain 253 in labels of at most 63, the whole address 254."""
    if len(address) > MAX_EMAIL_LENGTH:
        return f"an email address is at most {MAX_EMAIL_LENGTH} characters (RFC 5321)"
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return "an email address needs a local part, an @ and a domain"
    if len(local) > MAX_LOCAL_PART:
        return f"the part before the @ is at most {MAX_LOCAL_PART} characters (RFC 5321)"
    if not _LOCAL_PART.fullmatch(local):
        return "the part before the @ may hold letters, digits, !#$%&'*+/=?^_`{|}~- and single dots inside"
    labels = domain.split(".")
    if len(domain) > MAX_DOMAIN or len(labels) < 2:
        return f"the domain needs at least two labels and at most {MAX_DOMAIN} characters"
    if not all(len(label) <= MAX_LABEL and _LABEL.fullmatch(label) for label in labels):
        return f"each domain label is 1-{MAX_LABEL} letters, digits or inner hyphens"
    if labels[-1].isdigit():
        return "the top-level domain cannot be all digits"
    return None


def _email(address: str) -> str:
    problem = email_problem(address)
    if problem:
        raise ValueError(problem)
    return address


EmailAddress = Annotated[
    str,
    Field(
        max_length=MAX_EMAIL_LENGTH, examples=["ada@example.com"], strict=True, json_schema_extra={"format": "email"}
    ),
    AfterValidator(_email),
]
"""A recipient the orders API, the mail sandbox and the notification service all accept."""
Sku = Annotated[
    str,
    StringConstraints(pattern=r"^sku-[a-z0-9-]{1,40}$", strict=True),
    Field(examples=["sku-espresso"]),
]


Quantity = Annotated[int, Field(ge=1, le=MAX_QUANTITY, strict=True)]
AmountCents = Annotated[int, Field(gt=0, le=MAX_AMOUNT_CENTS, strict=True)]
PaymentMethodId = Annotated[str, StringConstraints(pattern=r"^pm_[a-z0-9_]{1,60}$", strict=True)]
SINGLE_LINE_NOT_BLANK = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
"""The JSON Schema pattern of what _single_line and _not_blank accept (the OpenAPI documents say it)."""
SINGLE_LINE = r"^[^\x00-\x1f\x7f-\x9f]*$"
OrderId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_KEY_LENGTH, strict=True),
    Field(json_schema_extra={"pattern": SINGLE_LINE_NOT_BLANK}),
    AfterValidator(_single_line),
    AfterValidator(_not_blank),
]
"""An order's id as the services pass it on (the API makes UUIDs; sandboxes take any such id)."""
IdempotencyKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_KEY_LENGTH, strict=True),
    AfterValidator(_single_line),
    AfterValidator(_not_blank),
]
Subject = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SUBJECT, strict=True), AfterValidator(_single_line)
]
MessageBody = Annotated[str, StringConstraints(max_length=MAX_BODY, strict=True), AfterValidator(_multi_line)]
Reason = Annotated[str, StringConstraints(max_length=500, strict=True), AfterValidator(_multi_line)]


IDEMPOTENCY_KEY_PATTERN = r"^[ -~]*[!-~][ -~]*$"
"""The JSON Schema pattern of the keys idempotency_key_problem accepts: printable ASCII, not blank."""


def idempotency_key_schema(what: str) -> dict[str, JsonValue]:
    """The OpenAPI schema of an Idempotency-Key header the route checks with idempotency_key_problem
    (refusing any other key with 400): `what` says what the key stands for."""
    return {
        "description": f"printable ASCII, not blank: {what}",
        "pattern": IDEMPOTENCY_KEY_PATTERN,
        "maxLength": MAX_KEY_LENGTH,
    }


def idempotency_key_problem(value: str | None) -> str | None:
    """Why a request's Idempotency-Key header cannot be used, or None. An empty or blank key would
    be one key shared by every client that sent it, so it is refused, not taken."""
    if value is None:
        return None
    if not value.strip():
        return "the Idempotency-Key header is empty: send a unique key, or no header at all"
    if len(value) > MAX_KEY_LENGTH:
        return f"the Idempotency-Key header is longer than {MAX_KEY_LENGTH} characters"
    if _CONTROL.search(value) or not value.isascii():
        return "the Idempotency-Key header must be printable ASCII"
    return None
