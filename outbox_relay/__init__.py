"""The outbox relay as this platform runs it (`python -m outbox_relay`): every service's outbox
published to Kafka, each row marked published only after the broker confirmed it.

The engine is the library's (`effectively_once.relay`, in the wheel a team installs); this
package is the platform's use of it: its wiring from the topology (`wiring.py`), its entry point
(`__main__.py`) and the Debezium alternative (`debezium/`). README.md beside this file tells the
problem it solves and the labs that break it.
"""
