"""Checks a process's HTTP endpoints make before they act on a request, and how a refusal
words what it quotes. The control endpoint (WSGI) uses them; a web front door (the demo's FastAPI
middleware) can use the same ones.

- **Host**: only the loopback names, IP literals (a DNS-rebinding page always arrives under a
  name of its own) and the names in `ALLOWED_HOSTS` (comma-separated). Anything else is refused.
- **Origin**: a browser's cross-site request is refused (`origin_refusal`).
- **Request line**: a path or query that is not valid UTF-8 once percent-decoded, or that holds
  control characters (NUL included), is refused.
- **Bodies**: a JSON body must be valid UTF-8 JSON without NaN or Infinity and without NUL or
  lone surrogates in any string; a form body the same, field by field.
- **Quoting**: `cut` makes any value printable and short before an error shows it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes, urlsplit

from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_BODY_BYTES = 1_000_000
MAX_SHOWN = 80
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


class Refused(ValueError):
    """A request refused at the door, with its status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HostSettings(BaseSettings):
    """Which Host names a process answers besides loopback names and IP literals; every process's
    settings hold it (effectively_once.process.ProcessSettings)."""

    model_config = SettingsConfigDict(extra="ignore")

    ALLOWED_HOSTS: str = ""
    """Comma-separated names (a reverse proxy's, a container's) this process answers to."""

    def allowed_hosts(self) -> frozenset[str]:
        """The names in ALLOWED_HOSTS, lower-cased."""
        return frozenset(name.strip().lower() for name in self.ALLOWED_HOSTS.split(",") if name.strip())


def configured_hosts() -> frozenset[str]:
    """The names in the process's ALLOWED_HOSTS, lower-cased."""
    return HostSettings().allowed_hosts()


def host_name(header: str) -> str:
    """The name part of a Host header (without its port; an IPv6 literal without its brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str | None, extra: frozenset[str]) -> bool:
    if not header:
        return False
    name = host_name(header)
    if name in LOOPBACK_NAMES or name in extra:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_refusal(origin: str | None, host: str | None, fetch_site: str | None, scheme: str = "http") -> str | None:
    """Why a request sent by a browser page of another origin must be refused, or None. An origin
    is its scheme, host and port: a page served over https is another origin than this http
    service, whatever its host says."""
    if fetch_site == "cross-site":
        return "refused: this request comes from another site"
    if origin is None:
        return None
    parts = urlsplit(origin)
    if origin == "null" or parts.netloc.lower() != (host or "").lower() or parts.scheme.lower() != scheme.lower():
        return f"refused: this request comes from another origin ({cut(origin)})"
    return None


def request_line_problem(raw_path: bytes, query_string: bytes) -> str | None:
    """Why a request's path or query cannot be read as text, or None."""
    try:
        path = unquote_to_bytes(raw_path).decode("utf-8")
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        return "the path or the query is not valid UTF-8"
    if CONTROL_CHARACTERS.search(path) or any(
        CONTROL_CHARACTERS.search(name) or CONTROL_CHARACTERS.search(value) for name, value in pairs
    ):
        return "the path or the query holds control characters"
    return None


def _reject_constant(name: str) -> None:
    raise Refused(400, f"the body holds {name}: JSON numbers must be finite")


def json_problem(body: bytes) -> str | None:
    """Why a JSON body is refused before any model sees it (None: let the route validate it).
    Malformed JSON is left to the route, which answers 422 naming the position."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not valid UTF-8"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except Refused as refusal:
        return str(refusal)
    except RecursionError:
        return "the body is nested too deeply"
    except ValueError:
        return None
    try:
        return _text_problem(value, "body")
    except RecursionError:
        return "the body is nested too deeply"


def _text_problem(value: Any, where: str) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where} holds a lone UTF-16 surrogate"
        return f"{where} holds a NUL character" if "\x00" in value else None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        inner = f"{where}.{cut(key, 40)}" if isinstance(key, str) else f"{where}[{key}]"
        problem = (_text_problem(key, f"{where} (a key)") if isinstance(key, str) else None) or _text_problem(
            item, inner
        )
        if problem:
            return problem
    return None


def form_problem(body: bytes) -> str | None:
    try:
        pairs = parse_qsl(body.decode("latin-1"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        return "the form is not valid UTF-8"
    for name, value in pairs:
        if "\x00" in name or "\x00" in value:
            return f"the form field {cut(name)} holds a NUL character"
    return None


def cut(value: Any, most: int = MAX_SHOWN) -> str:
    """A value as an error may show it: printable, and at most `most` characters (and a count)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").encode("unicode_escape").decode("ascii")
    return text if len(text) <= most else f"{text[:most]}… ({len(text)} characters)"
