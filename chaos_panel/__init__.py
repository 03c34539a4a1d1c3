"""The chaos panel (`python -m chaos_panel`): the workshop's web face on the running platform.

It shows the system as it runs (the map, each order's timeline and proof, the auditor's
verdict) and acts on it (faults, redeliveries, teaching strategies, group rewinds, loads, labs).
Its parts, by role:

- `web/`: the FastAPI application, its pages, its POST actions and GET reads, who may use them;
- `reading/`: what it reads from the databases, Kafka, Prometheus and the processes;
- `acting/`: what it does to the processes, the sandboxes, the brokers and the topics;
- `domain/`: an order's timeline and proof, worked out from what was read (no I/O);
- `drawing/`: the system map and the charts, as SVG (no I/O);
- `context.py` builds and wires them from `settings.py`.

The auditor it shows is a package of its own (`auditor/`), which `make audit` and the soak use too.
"""
