"""Who may press the panel's buttons.

- Every request's Host must be a loopback name, an IP literal or a name in ALLOWED_HOSTS (the
  front door, services/http_front_door.py): a page under a foreign name that resolves to
  127.0.0.1 (DNS rebinding) is refused before it reads anything.
- Bound to loopback (the default), no token is needed: only this machine can reach it.
- Bound elsewhere (exposed mode), every page, fragment and API read needs the token as well as
  every action: `Authorization: Bearer <token>`, or the cookie that the POST form at `/login` sets
  once it has checked the token and the login page's CSRF token (so another site cannot log a
  browser in). Only `/login`, `/healthz`, `/metrics` (counters, no order data) and `/static`
  answer without it.
- Either way, a control action must come from the panel's own pages: a JSON body (which a
  cross-site form cannot send without a CORS preflight the panel never grants), or the CSRF token
  of the page's cookie echoed in the `X-CSRF-Token` header or a `csrf_token` field. A request whose
  Origin (or Referer) is another origin (another scheme, host or port) is refused outright.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from effectively_once.request_checks import origin_refusal

TOKEN_COOKIE = "eo_panel_token"
CSRF_COOKIE = "eo_csrf"
CSRF_HEADER = "x-csrf-token"
OPEN_PATHS = ("/login", "/healthz", "/metrics", "/static/")
"""What answers without the token in exposed mode."""


class Guard:
    def __init__(self, token: str, loopback_only: bool) -> None:
        self.token_required = not loopback_only
        self.token = token or (secrets.token_urlsafe(24) if self.token_required else "")

    def token_ok(self, request: Request) -> bool:
        if not self.token_required:
            return True
        offered = request.cookies.get(TOKEN_COOKIE, "")
        authorization = request.headers.get("authorization", "")
        if authorization.lower().startswith("bearer "):
            offered = authorization[7:].strip()
        return bool(offered) and hmac.compare_digest(offered.encode(), self.token.encode())

    def token_matches(self, offered: str) -> bool:
        return bool(self.token) and hmac.compare_digest(offered.encode(), self.token.encode())

    def may_read(self, path: str, request: Request) -> bool:
        """Whether a read of `path` may be answered (exposed mode: only with the token)."""
        return not self.token_required or path.startswith(OPEN_PATHS) or self.token_ok(request)

    def check(self, request: Request, form_csrf: str | None) -> None:
        """Raise 403 unless this control request may act."""
        if not same_origin(request):
            raise HTTPException(403, "refused: this request comes from another site")
        if not self.token_ok(request):
            raise HTTPException(403, "refused: a token is needed (log in at /login, or send a Bearer token)")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "application/json":
            return
        if not self.csrf_matches(request, form_csrf or ""):
            raise HTTPException(403, "refused: the form's CSRF token is missing or stale (reload the page)")

    @staticmethod
    def csrf_matches(request: Request, form_csrf: str) -> bool:
        """Whether the page's CSRF cookie is echoed, in the X-CSRF-Token header or the form."""
        cookie = request.cookies.get(CSRF_COOKIE, "")
        echoed = request.headers.get(CSRF_HEADER) or form_csrf
        return bool(cookie) and hmac.compare_digest(cookie.encode(), echoed.encode())


def same_origin(request: Request) -> bool:
    """The front door's origin rule (scheme, host and port), with the Referer standing in for a
    missing Origin."""
    source = request.headers.get("origin") or request.headers.get("referer") or None
    if source is not None and source != "null":
        parts = urlsplit(source)
        source = f"{parts.scheme}://{parts.netloc}"
    fetch_site = request.headers.get("sec-fetch-site")
    return origin_refusal(source, request.headers.get("host"), fetch_site, request.url.scheme) is None


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)
