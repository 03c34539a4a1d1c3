CREATE TABLE IF NOT EXISTS mail_message (
    idempotency_key text        PRIMARY KEY CHECK (idempotency_key <> '' AND length(idempotency_key) <= 255),
    recipient       text        NOT NULL,
    subject         text        NOT NULL,
    body            text        NOT NULL,
    order_id        text,
    deliveries      integer     NOT NULL DEFAULT 1,
    received_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS mail_message_order_id ON mail_message (order_id);
CREATE INDEX IF NOT EXISTS mail_message_received_at ON mail_message (received_at DESC);
