"""`python -m services.payment`: the payment-authorization consumer."""

from services import consumer_process
from services.payment.handlers import HANDLERS
from services.safe_horizons import PROVIDER_KEYS
from services.saga_contract import not_handled

if __name__ == "__main__":
    consumer_process.run(
        "payment-authorization-v1", HANDLERS, ignored_types=not_handled(HANDLERS), windows=(PROVIDER_KEYS,)
    )
