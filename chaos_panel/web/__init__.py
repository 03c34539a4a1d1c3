"""The panel's web face: `app.py` (the FastAPI application), `pages.py` (pages and the fragments
they poll), `reads.py` (GET /api/…), `actions.py` (POST /api/…), `dependencies.py` (the panel
and its parts for routes, through `Depends`), `security.py` (who may read and act)."""
