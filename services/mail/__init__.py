"""The mail sandbox: accepts messages once per idempotency key and shows an inbox page."""
