-- One row per Idempotency-Key: the first request's fingerprint and, once done, its response,
-- which every later request with the same key receives again (errors included).
CREATE TABLE IF NOT EXISTS idempotency_key (
    key             text        PRIMARY KEY CHECK (key <> '' AND length(key) <= 255),
    request_hash    text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('in_flight', 'done')),
    response_status integer,
    response_body   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz
);
CREATE INDEX IF NOT EXISTS idempotency_key_created_at ON idempotency_key (created_at);

-- The ledger: every charge ever made. One per key, by construction.
CREATE TABLE IF NOT EXISTS charge (
    charge_id       text        PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE REFERENCES idempotency_key (key),
    order_id        text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS charge_order_id ON charge (order_id);
