-- The business key: one notification per order and kind.
CREATE TABLE IF NOT EXISTS notification (
    order_id        text        NOT NULL,
    kind            text        NOT NULL,
    idempotency_key text        NOT NULL UNIQUE,
    recipient       text        NOT NULL,
    subject         text        NOT NULL,
    body            text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'sent')),
    send_attempts   integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    PRIMARY KEY (order_id, kind)
);
CREATE INDEX IF NOT EXISTS notification_pending ON notification (next_attempt_at) WHERE status = 'pending';

-- Wakes the executor (notify_channel comes with the runtime's migrations, applied first).
DROP TRIGGER IF EXISTS notification_notify ON notification;
CREATE TRIGGER notification_notify AFTER INSERT ON notification
    FOR EACH STATEMENT EXECUTE FUNCTION notify_channel('notification');

-- A second consumer of PaymentAuthorized in this database, under its own consumer name.
CREATE TABLE IF NOT EXISTS sales_projection (
    order_id      text        PRIMARY KEY,
    amount_cents  bigint      NOT NULL,
    authorized_at timestamptz NOT NULL
);
