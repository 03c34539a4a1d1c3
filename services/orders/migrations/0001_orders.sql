CREATE TABLE IF NOT EXISTS customer_order (
    order_id        text        PRIMARY KEY,
    idempotency_key text        UNIQUE,
    request_hash    text        NOT NULL,
    customer_email  text        NOT NULL,
    payment_method  text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    status          text        NOT NULL CHECK (status IN
                    ('PLACED', 'RESERVED', 'PAID', 'CONFIRMED', 'REJECTED', 'CANCELLED')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS customer_order_created_at ON customer_order (created_at DESC);

CREATE TABLE IF NOT EXISTS order_line (
    order_id         text    NOT NULL REFERENCES customer_order (order_id),
    sku              text    NOT NULL,
    quantity         integer NOT NULL CHECK (quantity > 0),
    unit_price_cents bigint  NOT NULL CHECK (unit_price_cents >= 0),
    PRIMARY KEY (order_id, sku)
);

-- Every saga event the order saw, in arrival order, with the status it left the order in.
CREATE TABLE IF NOT EXISTS order_history (
    order_id     text        NOT NULL,
    message_id   text        NOT NULL,
    event_type   text        NOT NULL,
    status_after text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (order_id, message_id)
);
