"""The auditor: proves from the databases and the sandboxes' ledgers that nothing was lost and
nothing doubled (`invariants.py`), and lists the dead letters (`dead_letters.py`). `make audit`
(`python -m auditor`) prints its verdict; the chaos panel shows it; the soak ends with it."""
