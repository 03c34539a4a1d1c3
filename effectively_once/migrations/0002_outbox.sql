-- The transactional outbox: a service writes its events here in the same transaction as the
-- business change; the relay publishes them to Kafka and marks them published only once the
-- broker confirmed them. `position` is the commit-independent order the relay follows per key.
CREATE TABLE IF NOT EXISTS outbox (
    message_id      text        PRIMARY KEY CHECK (message_id <> '' AND length(message_id) <= 255),
    position        bigserial   NOT NULL UNIQUE,
    aggregate_type  text        NOT NULL,
    aggregate_key   text        NOT NULL,
    event_type      text        NOT NULL,
    event_version   integer     NOT NULL DEFAULT 1,
    topic           text        NOT NULL,
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (position) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- NOTIFY the channel named by the trigger's argument, once per inserting statement, delivered at
-- commit (a rolled-back transaction notifies nobody). The relay and the executors wake on it.
CREATE OR REPLACE FUNCTION notify_channel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION notify_channel('outbox');
