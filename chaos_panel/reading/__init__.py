"""What the panel reads: `records.py` (orders and outbox rows), `telemetry_store.py` (what the
processes told, from Kafka), `map_readings.py` (the map's figures at one moment), `proof_facts.py`
(the facts behind an order's proof), `safe_horizons.py` (each consumer's safe horizon, cached),
`debezium_slots.py` (RELAY=debezium's slots and connectors), `health.py` (whether the
infrastructure answers)."""
