"""`python -m services.notification dispatch|projection`: one of notification's two consumers."""

import sys

from services import consumer_process
from services.notification.handlers import DISPATCH_HANDLERS, PROJECTION_HANDLERS
from services.saga_contract import not_handled

CONSUMERS = {
    "dispatch": ("notification-dispatch-v1", DISPATCH_HANDLERS),
    "projection": ("sales-projection-v1", PROJECTION_HANDLERS),
}

if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else "dispatch"
    if role not in CONSUMERS:
        raise SystemExit(f"unknown role {role!r}: dispatch or projection")
    name, handlers = CONSUMERS[role]
    consumer_process.run(name, handlers, ignored_types=not_handled(handlers))
