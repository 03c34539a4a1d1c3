-- A payment attempt that cannot succeed is parked as failed with its reason (never left pending
-- for ever): a refusal by the provider, or transient failures past the retry policy's maximum age.
ALTER TABLE payment_attempt DROP CONSTRAINT IF EXISTS payment_attempt_status_check;
ALTER TABLE payment_attempt ADD CONSTRAINT payment_attempt_status_check
    CHECK (status IN ('pending', 'authorized', 'declined', 'failed'));
ALTER TABLE payment_attempt ADD COLUMN IF NOT EXISTS failure_reason text;
ALTER TABLE payment_attempt ADD COLUMN IF NOT EXISTS parked_at timestamptz;
-- Transient failures are retried for a maximum age counted from here.
ALTER TABLE payment_attempt ADD COLUMN IF NOT EXISTS retrying_since timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS payment_attempt_parked ON payment_attempt (parked_at) WHERE status = 'failed';
