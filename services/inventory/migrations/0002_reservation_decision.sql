-- One decision per order: inventory reserves it or refuses it once, whatever message ids its
-- OrderPlaced arrives under (a producer's retry before its outbox, a replay under new ids). The
-- handler claims this row before anything else, as the runtime claims a marker: a second
-- OrderPlaced for the order finds it taken (waiting, if need be, for the first to commit), changes
-- nothing and announces nothing new.
CREATE TABLE IF NOT EXISTS reservation_decision (
    order_id   text        PRIMARY KEY,
    decided_by text        NOT NULL,
    outcome    text        CHECK (outcome IN ('reserved', 'refused')),
    reason     text,
    decided_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN reservation_decision.decided_by IS 'the message id of the OrderPlaced that decided';
COMMENT ON COLUMN reservation_decision.outcome IS 'set in the transaction that claimed the row';

-- Orders decided before this table: those with reservations, and those whose refusal the outbox
-- still holds.
INSERT INTO reservation_decision (order_id, decided_by, outcome)
SELECT DISTINCT order_id, '(decided before reservation_decision)', 'reserved' FROM reservation
ON CONFLICT (order_id) DO NOTHING;
INSERT INTO reservation_decision (order_id, decided_by, outcome, reason)
SELECT DISTINCT ON (aggregate_key) aggregate_key, '(decided before reservation_decision)', 'refused', payload->>'reason'
  FROM outbox WHERE event_type = 'InventoryReservationFailed'
ON CONFLICT (order_id) DO NOTHING;
