"""`python -m services.mail`: the mail sandbox."""

import os

import uvicorn

from effectively_once.telemetry import announce_start
from services import sandbox_admin
from services.mail.app import create_app

if __name__ == "__main__":
    announce_start("mail")
    uvicorn.run(
        create_app(os.environ["DATABASE_URL"], sandbox_admin.password_from_environment()),
        host=os.environ.get("MAIL_HOST", "127.0.0.1"),
        port=int(os.environ.get("MAIL_PORT", "8002")),
        log_level="warning",
    )
