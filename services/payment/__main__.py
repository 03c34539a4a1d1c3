"""`python -m services.payment`: the payment-authorization consumer."""

from services.idempotent_consumer import runner
from services.payment.handlers import HANDLERS
from services.saga_contract import not_handled
from services.topology import consumer

if __name__ == "__main__":
    authorization = consumer("payment-authorization-v1")
    runner.run(authorization.name, authorization.topics, HANDLERS, ignored_types=not_handled(HANDLERS))
