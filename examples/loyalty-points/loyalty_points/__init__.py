"""Loyalty points: a customer earns points once per confirmed order, and loses them on a refund."""

from pathlib import Path

MIGRATIONS = Path(__file__).parent / "migrations"
