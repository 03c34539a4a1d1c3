"""The principal of the tools a person runs by hand against a running system (`make audit`,
`make soak`): the operator, unless the environment already names one."""

from __future__ import annotations

import os

from effectively_once.kafka_client import principal_from_environment
from services.kafka_access import OPERATOR
from services.settings import Settings


def act_as_operator(settings: Settings) -> None:
    """Make this process's Kafka clients authenticate as the operator principal."""
    if principal_from_environment() is None:
        os.environ.update(settings.kafka_principal(OPERATOR).environment())
