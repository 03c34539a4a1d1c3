"""One module per lab, each a `run(session)` that stages the failure and checks what follows."""
