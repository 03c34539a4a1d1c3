"""What the benchmarks share with the tests: a ledger consumer's schema and handlers (`ledger.py`),
a Debezium worker of one's own (`cdc.py`), a free port (`network.py`). The tests may use it;
it imports nothing of the tests."""
