"""What the panel does: `control_endpoints.py` (every process's control endpoint and the
sandboxes' fault APIs), `injector.py` (redeliveries, copies, poison and re-drives, produced for
real), `broker_faults.py` (the Kafka nodes), `load_runner.py` (orders placed), `lab_runs.py`
(a workshop lab run for a learner who predicted its outcome)."""
