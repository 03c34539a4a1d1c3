-- The envelope consumers decode, written once with its row: one definition for both relays. The
-- built-in relay sends this column's text as the message value, and so does Debezium's outbox
-- event router (RELAY=debezium), so a consumer receives the same bytes from either. The trigger
-- fills it for every writer (the Python runtime, the Java and TypeScript stacks, a team's own),
-- with times in UTC whatever the session's time zone.
--
-- Rows written before this migration have no envelope; the relay builds theirs as it did.

ALTER TABLE outbox ADD COLUMN IF NOT EXISTS envelope text;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS trace_id text;  -- a column of its own: a header under CDC
-- The transaction that wrote the row: under CDC the relay marks a row published once Debezium's
-- slot has confirmed every transaction below a watermark (effectively_once/relay/cdc.py).
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS xact xid8;

CREATE OR REPLACE FUNCTION outbox_envelope() RETURNS trigger
    LANGUAGE plpgsql SET timezone = 'UTC' AS $$
BEGIN
    NEW.trace_id := NEW.headers->>'trace_id';
    NEW.xact := pg_current_xact_id();
    NEW.envelope := json_build_object('message_id', NEW.message_id, 'type', NEW.event_type,
                                      'version', NEW.event_version, 'key', NEW.aggregate_key,
                                      'occurred_at', NEW.created_at, 'trace_id', NEW.trace_id,
                                      'payload', NEW.payload)::text;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS outbox_envelope ON outbox;
CREATE TRIGGER outbox_envelope BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_envelope();

-- One row that Debezium's connector rewrites every second (its heartbeat.action.query): an insert
-- it reads from the log even while the outbox is idle, so its position, and its slot's confirmed
-- position, move on together, and the slot keeps no log that other tables write meanwhile.
CREATE TABLE IF NOT EXISTS outbox_cdc_heartbeat (beat timestamptz NOT NULL DEFAULT now());

-- What logical decoding hands to Debezium: inserts only (the built-in relay's marks and the
-- purge are none of its business), under the partitioned table's own name, not its days'.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'eo_outbox') THEN
        CREATE PUBLICATION eo_outbox FOR TABLE outbox, outbox_cdc_heartbeat
            WITH (publish = 'insert', publish_via_partition_root = true);
    END IF;
END;
$$;
