"""The panel's pictures, free of I/O: `system_map.py` (the front page's boxes and arrows) and
`charts.py` (small live charts from Prometheus range queries, as SVG)."""
