-- One award per order (the business key), whatever message ids say; the balance moves with it.
CREATE TABLE IF NOT EXISTS points_award (
    order_id    text        PRIMARY KEY,
    customer_id text        NOT NULL,
    points      integer     NOT NULL CHECK (points >= 0),
    status      text        NOT NULL CHECK (status IN ('awarded', 'refunded')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS points_balance (
    customer_id text    PRIMARY KEY,
    points      integer NOT NULL
);
