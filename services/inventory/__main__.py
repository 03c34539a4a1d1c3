"""`python -m services.inventory`: the inventory-reservation consumer."""

from services import consumer_process
from services.inventory.handlers import HANDLERS
from services.saga_contract import not_handled

if __name__ == "__main__":
    consumer_process.run("inventory-reservation-v1", HANDLERS, ignored_types=not_handled(HANDLERS))
