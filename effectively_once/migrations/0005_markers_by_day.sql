-- Markers partitioned by the UTC day their message occurred, so that retention drops a whole
-- expired day (no dead tuples, no vacuum, the bytes returned) instead of deleting row by row, and
-- a claim's cost stays flat as the table grows (benchmarks/table_growth.py).
--
-- A unique key on a partitioned table must hold the partition column: the marker's key becomes
-- (consumer, message id, occurred_at). Both come from the message's envelope, written once with
-- its outbox row, so every redelivery of a message carries the same pair. A producer that sends
-- an event again must send it unchanged (its id AND its occurred_at), as replay tools do.
--
-- Markers written before this migration have no occurred_at: they stay in
-- processed_message_legacy, which every claim also consults, until retention empties it; it then
-- becomes an empty view (processed_message_retire_legacy) that the planner removes from the claim.

-- Written to run again harmlessly (the test and bench tiers apply the files as they are).
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('processed_message')) = 'r' THEN
        ALTER TABLE processed_message RENAME TO processed_message_legacy;
        ALTER INDEX processed_message_pkey RENAME TO processed_message_legacy_pkey;
        ALTER INDEX processed_message_processed_at RENAME TO processed_message_legacy_processed_at;
    END IF;
END;
$$;
DROP INDEX IF EXISTS processed_message_processed_at; -- 0001's index, should it run again: retention needs none

CREATE TABLE IF NOT EXISTS processed_message (
    consumer_name text        NOT NULL CHECK (consumer_name <> ''),
    message_id    text        NOT NULL CHECK (message_id <> '' AND length(message_id) <= 255),
    occurred_at   timestamptz NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- Whatever no day partition holds yet (a day not created in advance, a clock far ahead). The
-- upkeep moves a day's rows out of it when it creates that day's partition.
CREATE TABLE IF NOT EXISTS processed_message_default PARTITION OF processed_message DEFAULT;

-- The partition of `parent` (range-partitioned by `by`) for one UTC day, named parent_YYYYMMDD,
-- created if missing; returns its name. The day's rows already in the default partition
-- (parent_default), which would otherwise refuse the new range, move into it. Callers serialise
-- on an advisory lock, so two upkeeps never race to create the same day. The outbox uses it too.
CREATE OR REPLACE FUNCTION day_partition(parent text, by text, day date) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    name  text        := parent || '_' || to_char(day, 'YYYYMMDD');
    lower timestamptz := day::timestamp AT TIME ZONE 'UTC';
    upper timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    PERFORM pg_advisory_xact_lock(7301002);
    IF to_regclass(name) IS NOT NULL THEN
        RETURN name;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, parent);
    EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= %L AND %I < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
                   parent || '_default', by, lower, by, upper, name);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, name, lower, upper);
    RETURN name;
END;
$$;

CREATE OR REPLACE FUNCTION processed_message_day(day date) RETURNS text LANGUAGE sql AS $$
    SELECT day_partition('processed_message', 'occurred_at', day)
$$;

-- Once the legacy table holds nothing, replace it with an empty view of the same columns: claims
-- keep their SQL, and the planner drops the lookup. Returns whether the legacy table is gone.
CREATE OR REPLACE FUNCTION processed_message_retire_legacy() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('processed_message_legacy')) = 'v' THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM processed_message_legacy) THEN
        RETURN false;
    END IF;
    LOCK TABLE processed_message_legacy IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM processed_message_legacy) THEN
        RETURN false;
    END IF;
    DROP TABLE processed_message_legacy;
    CREATE VIEW processed_message_legacy AS
        SELECT NULL::text AS consumer_name, NULL::text AS message_id, NULL::timestamptz AS processed_at
         WHERE false;
    RETURN true;
END;
$$;

SELECT processed_message_day(((now() AT TIME ZONE 'UTC')::date + ahead)) FROM generate_series(0, 2) AS ahead;
SELECT processed_message_retire_legacy();
