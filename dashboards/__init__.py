"""Grafana dashboards built as code with grafana-foundation-sdk; `make dashboards` writes generated/."""
