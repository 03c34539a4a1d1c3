-- The marker: one committed row per (consumer, message) means that consumer applied that message.
-- Both columns are NOT NULL, so no delivery can slip past the primary key through NULL semantics.
CREATE TABLE IF NOT EXISTS processed_message (
    consumer_name text        NOT NULL CHECK (consumer_name <> ''),
    message_id    text        NOT NULL CHECK (message_id <> '' AND length(message_id) <= 255),
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id)
);

-- Retention purges by age, per consumer.
CREATE INDEX IF NOT EXISTS processed_message_processed_at ON processed_message (processed_at);
