"""The payment-provider sandbox: a stand-in for the outside world, with Stripe-like
Idempotency-Key semantics and a ledger of charges the auditor reads."""
