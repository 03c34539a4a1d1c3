"""`python -m services.payment_provider`: the provider sandbox."""

from effectively_once.process import load
from services.http_process import PaymentProviderSettings, serve_http
from services.payment_provider.app import create_app

if __name__ == "__main__":
    settings = load(PaymentProviderSettings)
    app = create_app(settings.DATABASE_URL, settings.SANDBOX_ADMIN_PASSWORD)
    serve_http("payment-provider", app, settings, *settings.listen)
