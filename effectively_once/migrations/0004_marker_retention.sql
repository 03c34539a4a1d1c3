-- How far each consumer's markers have been purged: every marker processed before
-- `purged_through` may be gone by design. The auditor reads it so that an effect whose marker
-- retention removed is not reported as a marker missing; a late replay of such a message is
-- refused by the runtime (older than the dedup horizon) and dead-lettered for an operator.
CREATE TABLE IF NOT EXISTS marker_retention (
    consumer_name  text        PRIMARY KEY CHECK (consumer_name <> ''),
    purged_through timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
