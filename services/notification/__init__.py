"""The notification service: a confirmation email per paid order, sent by a dispatcher with an
idempotency key; and a sales projection, a second consumer of the same event."""
