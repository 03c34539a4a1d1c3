"""`python -m services.inventory`: the inventory-reservation consumer."""

from services.idempotent_consumer import runner
from services.inventory.handlers import HANDLERS
from services.saga_contract import not_handled
from services.topology import consumer

if __name__ == "__main__":
    reservation = consumer("inventory-reservation-v1")
    runner.run(reservation.name, reservation.topics, HANDLERS, ignored_types=not_handled(HANDLERS))
