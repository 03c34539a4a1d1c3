"""`python -m services.payment`: the payment-authorization consumer."""

from effectively_once.safe_horizon import Window
from services import consumer_process
from services.payment.handlers import HANDLERS
from services.saga_contract import PROVIDER_KEY_LIFETIME, not_handled

PROVIDER_KEYS = Window("payment provider keys", PROVIDER_KEY_LIFETIME.total_seconds(), "a retried charge's key")

if __name__ == "__main__":
    consumer_process.run(
        "payment-authorization-v1", HANDLERS, ignored_types=not_handled(HANDLERS), windows=(PROVIDER_KEYS,)
    )
