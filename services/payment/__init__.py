"""The payment service: records a payment attempt per reserved order, and an executor that
charges it at the provider with an idempotency key derived from the attempt."""
