-- The deduplication strategy a consumer was switched to at run time (the chaos panel's teaching
-- switch). Kept in the service's database so a crash does not quietly heal a lesson; no row, or
-- `correct`, means the safe default.
CREATE TABLE IF NOT EXISTS consumer_setting (
    consumer_name text        PRIMARY KEY CHECK (consumer_name <> ''),
    strategy      text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
