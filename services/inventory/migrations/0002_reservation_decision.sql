-- The business key of inventory's decision: one per order, reserved or failed, whatever message
-- ids say. A semantic duplicate of OrderPlaced (a new id for the same fact, or a replay whose
-- marker retention purged) finds the decision made and does nothing: no second reservation
-- attempt, no second InventoryReserved or InventoryReservationFailed.
CREATE TABLE IF NOT EXISTS reservation_decision (
    order_id   text        PRIMARY KEY CHECK (order_id <> ''),
    decision   text        NOT NULL CHECK (decision IN ('reserved', 'failed')),
    decided_at timestamptz NOT NULL DEFAULT now()
);

-- Orders decided before this table existed: their decision is in the outbox (or, for a
-- reservation, in the reservation table).
INSERT INTO reservation_decision (order_id, decision)
SELECT DISTINCT ON (aggregate_key) aggregate_key,
       CASE event_type WHEN 'InventoryReserved' THEN 'reserved' ELSE 'failed' END
  FROM outbox
 WHERE event_type IN ('InventoryReserved', 'InventoryReservationFailed')
 ORDER BY aggregate_key, created_at
ON CONFLICT (order_id) DO NOTHING;
INSERT INTO reservation_decision (order_id, decision)
SELECT DISTINCT order_id, 'reserved' FROM reservation
ON CONFLICT (order_id) DO NOTHING;
