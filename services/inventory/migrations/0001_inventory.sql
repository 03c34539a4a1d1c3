-- available + reserved + sold = initial for every SKU: the auditor checks it.
CREATE TABLE IF NOT EXISTS stock (
    sku       text   PRIMARY KEY,
    initial   bigint NOT NULL CHECK (initial >= 0),
    available bigint NOT NULL CHECK (available >= 0),
    reserved  bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold      bigint NOT NULL DEFAULT 0 CHECK (sold >= 0)
);

-- The business key: one reservation per order and SKU, whatever message ids say.
CREATE TABLE IF NOT EXISTS reservation (
    order_id   text        NOT NULL,
    sku        text        NOT NULL REFERENCES stock (sku),
    quantity   integer     NOT NULL CHECK (quantity > 0),
    status     text        NOT NULL CHECK (status IN ('reserved', 'released', 'sold')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, sku)
);

-- The catalog's stock (services/saga_contract.py CATALOG; a test keeps the two equal).
INSERT INTO stock (sku, initial, available) VALUES
    ('sku-espresso', 100000, 100000),
    ('sku-grinder', 100000, 100000),
    ('sku-kettle', 100000, 100000),
    ('sku-filter', 100000, 100000),
    ('sku-limited', 5, 5)
ON CONFLICT (sku) DO NOTHING;
