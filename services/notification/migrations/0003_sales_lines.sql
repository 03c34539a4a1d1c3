-- The sales projection is a ledger of sales: one line per PaymentAuthorized it applies, summed
-- for the figures. Nothing in the table refuses a second line for an order: the consumer's marker
-- alone keeps each sale counted once, as in any projection that adds up (the lock-expiry lab
-- shows a strategy without a marker count a sale twice).
ALTER TABLE sales_projection ADD COLUMN IF NOT EXISTS line_id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE sales_projection DROP CONSTRAINT IF EXISTS sales_projection_pkey;
ALTER TABLE sales_projection ADD CONSTRAINT sales_projection_pkey PRIMARY KEY (line_id);
CREATE INDEX IF NOT EXISTS sales_projection_order ON sales_projection (order_id);
