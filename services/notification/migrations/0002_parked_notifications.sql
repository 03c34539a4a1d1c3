-- A notification that cannot be sent is parked as failed with its reason (never left pending for
-- ever): a refusal by the mail service, or transient failures past the retry policy's maximum
-- age. An operator's re-drive puts it back to pending, under its own idempotency key.
ALTER TABLE notification DROP CONSTRAINT IF EXISTS notification_status_check;
ALTER TABLE notification ADD CONSTRAINT notification_status_check
    CHECK (status IN ('pending', 'sent', 'failed'));
ALTER TABLE notification ADD COLUMN IF NOT EXISTS failure_reason text;
ALTER TABLE notification ADD COLUMN IF NOT EXISTS parked_at timestamptz;
-- Transient failures are retried for a maximum age counted from here (a re-drive resets it).
ALTER TABLE notification ADD COLUMN IF NOT EXISTS retrying_since timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS notification_parked ON notification (parked_at) WHERE status = 'failed';
