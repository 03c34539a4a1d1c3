"""The one error the launcher raises on purpose: what is wrong, and what to do about it."""

from __future__ import annotations


class LaunchError(Exception):
    """A problem a person can fix; printed without a stack trace."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.problem}\n  how to fix: {self.fix}"
