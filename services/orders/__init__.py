"""The orders service: the order API, and the saga state machine that follows every event."""
