"""`python -m effectively_once.relay`: the relay process (see run.py)."""

from .run import main

main()
