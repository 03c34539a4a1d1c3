-- The outbox partitioned by the UTC day its rows were created (the envelope's occurred_at), so
-- that the relay's purge drops a whole published day (no dead tuples, no vacuum, the bytes
-- returned) instead of deleting it row by row (benchmarks/outbox_growth.py).
--
-- A unique key on a partitioned table must hold the partition column: the key becomes
-- (message_id, created_at), and `position` is unique with created_at. Rows already in the outbox
-- move into the new table here, published or not, in one transaction.
--
-- The relay's role does not own the table, so it creates and drops days through the two
-- SECURITY DEFINER functions below; the step of schema.py that names the relay's role lets it
-- execute them, and no one else may.

-- Written to run again harmlessly (the test and bench tiers apply the files as they are).
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('outbox')) = 'r' THEN
        ALTER TABLE outbox RENAME TO outbox_before_partitioning;
        ALTER INDEX outbox_pkey RENAME TO outbox_before_partitioning_pkey;
        ALTER INDEX outbox_position_key RENAME TO outbox_before_partitioning_position_key;
        ALTER INDEX outbox_unpublished RENAME TO outbox_before_partitioning_unpublished;
        ALTER INDEX outbox_published_at RENAME TO outbox_before_partitioning_published_at;
        DROP TRIGGER outbox_notify ON outbox_before_partitioning;
    END IF;
END;
$$;

CREATE TABLE IF NOT EXISTS outbox (
    message_id      text        NOT NULL CHECK (message_id <> '' AND length(message_id) <= 255),
    position        bigint      NOT NULL DEFAULT nextval('outbox_position_seq'),
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
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, created_at),
    UNIQUE (position, created_at)
) PARTITION BY RANGE (created_at);

CREATE TABLE IF NOT EXISTS outbox_default PARTITION OF outbox DEFAULT;
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (position) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

DROP TRIGGER IF EXISTS outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION notify_channel('outbox');

-- Today and the next two days, as the relay's upkeep keeps them.
CREATE OR REPLACE FUNCTION outbox_upkeep() RETURNS void
    LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT day_partition('outbox', 'created_at', (now() AT TIME ZONE 'UTC')::date + ahead)
      FROM generate_series(0, 2) AS ahead
$$;

-- Drop the day's partition when it ended before `published_before` and every row in it was
-- published before that; returns how many rows went, or NULL when it stays (a row not yet
-- published or published later, or the table busy for longer than the lock timeout: dropping a
-- partition locks the outbox, and writers queue behind that lock while it waits).
CREATE OR REPLACE FUNCTION outbox_drop_day(day date, published_before timestamptz) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '1s' AS $$
DECLARE
    name text := 'outbox_' || to_char(day, 'YYYYMMDD');
    kept boolean;
    gone bigint;
BEGIN
    IF to_regclass(name) IS NULL OR (day + 1)::timestamp AT TIME ZONE 'UTC' > published_before THEN
        RETURN NULL;
    END IF;
    LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT EXISTS (SELECT FROM %I WHERE published_at IS NULL OR published_at >= %L)',
                   name, published_before) INTO kept;
    IF kept THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', name) INTO gone;
    EXECUTE format('DROP TABLE %I', name);
    RETURN gone;
EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION outbox_upkeep(), outbox_drop_day(date, timestamptz) FROM PUBLIC;

-- The rows of the table before partitioning, each day into its own partition; then the old table
-- goes (the position sequence passes to the new one first, so that it stays).
DO $$
BEGIN
    IF to_regclass('outbox_before_partitioning') IS NOT NULL THEN
        PERFORM day_partition('outbox', 'created_at', day)
           FROM (SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date AS day FROM outbox_before_partitioning) AS days;
        INSERT INTO outbox SELECT message_id, position, aggregate_type, aggregate_key, event_type, event_version,
                                  topic, payload, headers, created_at, published_at, attempts, last_error,
                                  next_attempt_at
                             FROM outbox_before_partitioning;
        ALTER SEQUENCE outbox_position_seq OWNED BY outbox.position;
        DROP TABLE outbox_before_partitioning;
    END IF;
END;
$$;

SELECT outbox_upkeep();
