-- One marker per (consumer, message id), whatever else a copy of the message carries.
--
-- Migration 0005 partitioned the markers by the day their message occurred. A unique key on a
-- partitioned table must hold the partition column, so the key became (consumer, message id,
-- occurred_at): a copy that kept the id but moved occurred_at claimed a second marker, in another
-- day, and was applied again. Here the partition column is a function of the id alone:
--
--   id_time  the time a UUIDv7 message id carries in its first 48 bits (the runtime, the Java and
--            TypeScript stacks mint such ids), or -infinity for an id that carries none (a
--            foreign producer's, or one minted before this migration). A CHECK ties the column to
--            the id, so no writer, and no copy, chooses it: (consumer, message id, id_time) is
--            unique exactly when (consumer, message id) is.
--
-- Timed markers live in day partitions as before: retention drops an expired day whole. Untimed
-- markers live in a partition of their own (processed_message_untimed), which retention purges
-- row by row by processed_at: their ids tell nothing of their age.
--
-- Each marker also keeps a digest of the content it was applied with, field by field, so that a
-- copy with the same id and other content (a producer's bug) is told apart from a plain
-- redelivery: it is a duplicate all the same, counted apart, its differing fields named.
--
-- Markers from before this migration (0005's table and any left in 0005's legacy table) move
-- into the new table here, one per (consumer, message id), the earliest kept; they have no
-- digest, so their copies count as plain duplicates. Written to run again harmlessly.

-- The time a message id carries, or -infinity. Only the canonical lower-case UUIDv7 text counts,
-- so that one id always maps to one time. (The three functions here are PL/pgSQL of one
-- expression each: a claim sent as a simple query would otherwise parse an SQL function's body
-- every time, and the CHECK below calls this one on every insert.)
CREATE OR REPLACE FUNCTION message_id_time(message_id text) RETURNS timestamptz
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    ms bigint;
BEGIN
    IF message_id IS NULL OR message_id !~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' THEN
        RETURN '-infinity';
    END IF;
    ms := ('x' || lpad(replace(left(message_id, 13), '-', ''), 16, '0'))::bit(64)::bigint;
    RETURN to_timestamp(ms / 1000) + (ms % 1000) * interval '1 millisecond';  -- exact at every scale
END;
$$;

-- What a copy's content is compared by: four bytes of MD5 per field, in the order of
-- message_content_fields(). `body` is the envelope as received (compared as JSON, so key order and
-- spacing do not count); `delivery` is {"key": the record key in hex, "headers": {name: [value in
-- hex, ...], ...}}, or NULL when the message did not come from Kafka: those two fields are then
-- unknown (zero bytes), and never differ. The headers the platform's own tools add to tell how a
-- copy was delivered (eo-injected, eo-redriven-from) are not content; eo-message-id is the id,
-- checked apart.
CREATE OR REPLACE FUNCTION message_content_fields() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['type', 'version', 'key', 'occurred_at', 'trace_id', 'payload', 'envelope_extras',
                 'record_key', 'headers']
$$;

CREATE OR REPLACE FUNCTION message_content_digest(body jsonb, delivery jsonb) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN decode(
        left(md5(coalesce(body->'type', 'null')::text), 8)
        || left(md5(coalesce(body->'version', '1')::text), 8)
        || left(md5(coalesce(body->'key', 'null')::text), 8)
        || left(md5(coalesce(body->'occurred_at', 'null')::text), 8)
        || left(md5(coalesce(body->'trace_id', 'null')::text), 8)
        || left(md5(coalesce(body->'payload', '{}')::text), 8)
        || left(md5((body - ARRAY['message_id', 'type', 'version', 'key', 'occurred_at', 'trace_id', 'payload'])::text), 8)
        || CASE WHEN delivery IS NULL THEN '00000000' ELSE left(md5(coalesce(delivery->'key', 'null')::text), 8) END
        || CASE WHEN delivery IS NULL THEN '00000000'
                ELSE left(md5((coalesce(delivery->'headers', '{}')
                               - ARRAY['eo-message-id', 'eo-injected', 'eo-redriven-from'])::text), 8) END,
        'hex');
END;
$$;

-- The fields in which two digests differ (those unknown on either side left out); NULL when
-- either digest is unknown (a marker from before this migration).
CREATE OR REPLACE FUNCTION message_content_differences(applied bytea, copy bytea) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    fields text[] := message_content_fields();
    differing text[] := '{}';
    a bytea;
    c bytea;
BEGIN
    IF applied IS NULL OR copy IS NULL THEN
        RETURN NULL;
    END IF;
    FOR n IN 1 .. array_length(fields, 1) LOOP
        a := substr(applied, n * 4 - 3, 4);
        c := substr(copy, n * 4 - 3, 4);
        IF a <> c AND a <> '\x00000000'::bytea AND c <> '\x00000000'::bytea THEN
            differing := differing || fields[n];
        END IF;
    END LOOP;
    RETURN differing;
END;
$$;

-- 0005's table and its days step aside under names of their own (the new days take theirs).
DO $$
DECLARE
    part record;
BEGIN
    IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('processed_message')
                                          AND attname = 'occurred_at' AND NOT attisdropped) THEN
        FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                     WHERE i.inhparent = to_regclass('processed_message') LOOP
            EXECUTE format('ALTER TABLE %I RENAME TO %I', part.relname, 'before_0008_' || part.relname);
        END LOOP;
        ALTER TABLE processed_message RENAME TO before_0008_processed_message;
        ALTER INDEX processed_message_pkey RENAME TO before_0008_processed_message_pkey;
    END IF;
END;
$$;

CREATE TABLE IF NOT EXISTS processed_message (
    consumer_name  text        NOT NULL CHECK (consumer_name <> ''),
    message_id     text        NOT NULL CHECK (message_id <> '' AND length(message_id) <= 255),
    id_time        timestamptz NOT NULL,
    content_digest bytea,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id, id_time),
    CONSTRAINT processed_message_id_time_is_the_ids CHECK (id_time = message_id_time(message_id))
) PARTITION BY RANGE (id_time);

CREATE TABLE IF NOT EXISTS processed_message_untimed PARTITION OF processed_message
    FOR VALUES FROM (MINVALUE) TO ('1970-01-01 00:00:00+00');
CREATE INDEX IF NOT EXISTS processed_message_untimed_processed_at ON processed_message_untimed (processed_at);
CREATE TABLE IF NOT EXISTS processed_message_default PARTITION OF processed_message DEFAULT;

-- The day partition of the markers whose ids carry that UTC day; created by their owner for
-- whoever calls (the consumers' upkeep), under day_partition's advisory lock.
CREATE OR REPLACE FUNCTION processed_message_day(day date) RETURNS text
    LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT day_partition('processed_message', 'id_time', day)
$$;

-- Drop one expired day of markers whole, when it ended before `cutoff` and holds no marker of a
-- consumer other than `consumer` (NULL: any consumer's), whose horizon may be longer. Returns how
-- many markers went; NULL when it stays (not over, or another's markers in it); -1 when the table
-- was busy for longer than the lock timeout (dropping a partition locks the markers, and claims
-- queue behind that lock while it waits): the next round tries again.
CREATE OR REPLACE FUNCTION processed_message_drop_day(day date, cutoff timestamptz, consumer text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET lock_timeout = '2s' AS $$
DECLARE
    name   text := 'processed_message_' || to_char(day, 'YYYYMMDD');
    others boolean;
    gone   bigint;
BEGIN
    IF to_regclass(name) IS NULL OR (day + 1)::timestamp AT TIME ZONE 'UTC' > cutoff THEN
        RETURN NULL;
    END IF;
    LOCK TABLE processed_message IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT EXISTS (SELECT FROM %I WHERE consumer_name IS DISTINCT FROM coalesce(%L, consumer_name))',
                   name, consumer) INTO others;
    IF others THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', name) INTO gone;
    EXECUTE format('DROP TABLE %I', name);
    RETURN gone;
EXCEPTION WHEN lock_not_available THEN
    RETURN -1;
END;
$$;

REVOKE ALL ON FUNCTION processed_message_day(date), processed_message_drop_day(date, timestamptz, text) FROM PUBLIC;

-- The markers of 0005's table and 0005's legacy table, one per (consumer, message id).
DO $$
DECLARE
    legacy "char" := (SELECT relkind FROM pg_class WHERE oid = to_regclass('processed_message_legacy'));
BEGIN
    IF to_regclass('before_0008_processed_message') IS NOT NULL THEN
        CREATE TEMPORARY TABLE markers_before_0008 ON COMMIT DROP AS
            SELECT consumer_name, message_id, processed_at FROM before_0008_processed_message;
        IF legacy = 'r' THEN
            INSERT INTO markers_before_0008 SELECT consumer_name, message_id, processed_at FROM processed_message_legacy;
        END IF;
        PERFORM processed_message_day(day)
           FROM (SELECT DISTINCT (message_id_time(message_id) AT TIME ZONE 'UTC')::date AS day
                   FROM markers_before_0008 WHERE message_id_time(message_id) > '1970-01-01') AS days;
        INSERT INTO processed_message (consumer_name, message_id, id_time, processed_at)
             SELECT consumer_name, message_id, message_id_time(message_id), min(processed_at)
               FROM markers_before_0008 GROUP BY consumer_name, message_id;
        DROP TABLE before_0008_processed_message;
    END IF;
    IF legacy = 'r' THEN
        DROP TABLE processed_message_legacy;
    ELSIF legacy = 'v' THEN
        DROP VIEW processed_message_legacy;
    END IF;
END;
$$;
DROP FUNCTION IF EXISTS processed_message_retire_legacy();

SELECT processed_message_day(((now() AT TIME ZONE 'UTC')::date + ahead)) FROM generate_series(0, 2) AS ahead;
