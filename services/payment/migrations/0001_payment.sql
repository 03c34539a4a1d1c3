-- The business key: one attempt per order and attempt number. The idempotency key the provider
-- sees is derived from it, so every retry of the attempt, by any process, is the same charge.
CREATE TABLE IF NOT EXISTS payment_attempt (
    order_id          text        NOT NULL,
    attempt           integer     NOT NULL CHECK (attempt > 0),
    idempotency_key   text        NOT NULL UNIQUE,
    amount_cents      bigint      NOT NULL CHECK (amount_cents > 0),
    payment_method    text        NOT NULL,
    customer_email    text        NOT NULL,
    status            text        NOT NULL CHECK (status IN ('pending', 'authorized', 'declined')),
    provider_charge_id text,
    provider_calls    integer     NOT NULL DEFAULT 0,
    last_error        text,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, attempt)
);
CREATE INDEX IF NOT EXISTS payment_attempt_pending ON payment_attempt (next_attempt_at) WHERE status = 'pending';

-- Wakes the executor (notify_channel comes with the runtime's migrations, applied first).
DROP TRIGGER IF EXISTS payment_attempt_notify ON payment_attempt;
CREATE TRIGGER payment_attempt_notify AFTER INSERT ON payment_attempt
    FOR EACH STATEMENT EXECUTE FUNCTION notify_channel('payment_attempt');
