"""Faults the provider sandbox can be told to inject (kept in the process's memory)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field


class ProviderFaults(BaseModel):
    """What the next requests meet. Rates are probabilities in [0, 1]."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decline_rate: float = Field(default=0.0, ge=0, le=1, description="decline a card that would pass")
    error_rate: float = Field(default=0.0, ge=0, le=1, description="answer 500 before doing anything")
    refusal_rate: float = Field(
        default=0.0, ge=0, le=1, description="refuse with 400 for good (a permanent failure), storing nothing"
    )
    latency_ms: int = Field(default=0, ge=0, le=30_000, description="wait this long before answering")
    timeout_after_charge: int = Field(
        default=0, ge=0, le=1_000, description="the next N charges succeed, but the answer comes too late"
    )
    timeout_seconds: float = Field(default=10.0, ge=0, le=120, description="how late that answer is")


@dataclass
class FaultState:
    faults: ProviderFaults

    def roll(self, rate: float) -> bool:
        return rate > 0 and random.random() < rate

    def take_timeout_after_charge(self) -> bool:
        if self.faults.timeout_after_charge > 0:
            self.faults.timeout_after_charge -= 1
            return True
        return False

    def describe(self) -> dict[str, object]:
        return asdict(self) | {"faults": self.faults.model_dump()}
