"""The panel's reasoning, free of I/O: `timeline.py` (one order's story in time order) and
`proof.py` (why each of an order's effects happened once, or did not)."""
