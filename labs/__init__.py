"""Workshop labs: each failure the idempotent-consumer pattern guards against, staged on the
running system through the chaos panel's API and checked, so that the lab texts in
docs/workshop/ never drift from what the platform does. `make lab NAME=…` runs one."""
