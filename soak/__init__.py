"""`make soak`: orders placed continuously under a chaos schedule, then the auditor's verdict."""
