"""`python -m services.payment_provider`: the provider sandbox."""

import os

import uvicorn

from effectively_once.telemetry import announce_start
from services import sandbox_admin
from services.payment_provider.app import create_app

if __name__ == "__main__":
    announce_start("payment-provider")
    uvicorn.run(
        create_app(os.environ["DATABASE_URL"], sandbox_admin.password_from_environment()),
        host=os.environ.get("PAYMENT_PROVIDER_HOST", "127.0.0.1"),
        port=int(os.environ.get("PAYMENT_PROVIDER_PORT", "8001")),
        log_level="warning",
    )
