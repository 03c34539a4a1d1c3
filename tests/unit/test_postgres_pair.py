"""How a standby reaches its primary, for any password: libpq reads back the password it was given."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from infra.launcher import postgres_pair
from services.settings import Settings

PASSWORDS = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1, max_size=30)


@given(PASSWORDS, st.sampled_from([1, 2]))
def test_a_standby_reaches_the_other_node_with_the_password_as_given(password: str, standby: int) -> None:
    settings = Settings(POSTGRES="ha", POSTGRES_PORT=7000, POSTGRES_PASSWORD=password)
    parsed = conninfo_to_dict(postgres_pair.primary_conninfo(settings, standby))
    assert parsed["password"] == password
    assert parsed["port"] == str(7000 + (2 - standby)), "the other node's port"
    assert parsed["application_name"] == f"node-{standby}"
