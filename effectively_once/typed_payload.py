"""Handlers that declare their payload as a pydantic model.

`typed(Model, handle)` is a handler like any other; the processor validates the payload before
any transaction begins, so a payload that does not fit claims no marker and is dead-lettered at
once (`invalid_payload`), the offending fields named. `handle(event, payload, connection)`
receives the validated model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg
from pydantic import BaseModel, ValidationError

from .envelope import Envelope

Model = TypeVar("Model", bound=BaseModel)
Connection = psycopg.Connection[Any]


class PayloadDoesNotFit(ValueError):
    """The payload is not what the handler declared; the message names each field and why."""


def describe(error: ValidationError, most: int = 5) -> str:
    """`lines.0.sku: String should have at most 64 characters; …`: fields, never their values
    (typed payloads and the processes' settings word their refusals alike)."""
    problems = [
        f"{'.'.join(str(part) for part in item['loc']) or 'payload'}: {item['msg']}" for item in error.errors()[:most]
    ]
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class TypedHandler(Generic[Model]):
    model: type[Model]
    handle: Callable[[Envelope, Model, Connection], None]

    def validate(self, event: Envelope) -> Model:
        try:
            return self.model.model_validate(event.payload)
        except ValidationError as error:
            raise PayloadDoesNotFit(
                f"{event.type} payload does not fit {self.model.__name__}: {describe(error)}"
            ) from None

    def bound(self, payload: Model) -> Callable[[Envelope, Connection], None]:
        """The handler for one event whose payload was validated already."""
        return lambda event, connection: self.handle(event, payload, connection)

    def __call__(self, event: Envelope, connection: Connection) -> None:
        self.handle(event, self.validate(event), connection)


def typed(model: type[Model], handle: Callable[[Envelope, Model, Connection], None]) -> TypedHandler[Model]:
    """A handler for events whose payload must be a `model`."""
    return TypedHandler(model, handle)
