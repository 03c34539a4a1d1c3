"""`python -m services.payment_provider`: the provider sandbox."""

from services.http_process import SandboxSettings, read, serve_http
from services.payment_provider.app import create_app

if __name__ == "__main__":
    settings = read(SandboxSettings)
    serve_http(
        "payment-provider",
        create_app(settings.DATABASE_URL, settings.SANDBOX_ADMIN_PASSWORD),
        "PAYMENT_PROVIDER_",
        8001,
    )
