"""Who may read or change a sandbox's injected faults: whoever holds SANDBOX_ADMIN_PASSWORD (the
chaos panel, and the tests), as `Authorization: Bearer <password>`. Anyone else gets 401 and the
faults stay as they were: the provider and the mail sandbox take payments and mail from the
services, and a fault is an operator's act."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from fastapi import Header, HTTPException

from services.settings import DEVELOPMENT_PASSWORD_SUFFIX

VARIABLE = "SANDBOX_ADMIN_PASSWORD"
DEVELOPMENT_DEFAULT = "sandbox-admin" + DEVELOPMENT_PASSWORD_SUFFIX
REFUSED: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid `Authorization: Bearer <SANDBOX_ADMIN_PASSWORD>`: nothing changed"}
}
"""The answer the admin routes document beside their own."""


def admin_only(password: str) -> Callable[[str | None], None]:
    """A FastAPI dependency that refuses any request without the password as its Bearer token."""
    expected = f"Bearer {password}".encode()

    def check(authorization: str | None = Header(default=None, include_in_schema=False)) -> None:
        if authorization is None or not hmac.compare_digest(authorization.strip().encode(), expected):
            raise HTTPException(
                401,
                f"the sandbox's faults need `Authorization: Bearer` with {VARIABLE}",
                {"WWW-Authenticate": "Bearer"},
            )

    return check


def admin_headers(password: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {password}"}
