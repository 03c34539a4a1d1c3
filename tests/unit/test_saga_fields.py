"""One definition of each field's limits: whatever the orders API accepts, the saga's payloads and
both sandboxes accept too (the mail sandbox once refused a 255-character address the API took)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from services import saga_contract as contract
from services.mail.app import MessageIn
from services.orders.api import OrderIn
from services.payment_provider.app import ChargeIn
from services.saga_fields import MAX_AMOUNT_CENTS, MAX_LINES, MAX_QUANTITY, email_problem

ADDRESSES = st.one_of(
    st.emails(),
    st.builds(
        lambda local, domain: f"{local}@{domain}",
        st.text(st.characters(codec="ascii"), min_size=0, max_size=80),
        st.text(st.characters(codec="ascii"), min_size=0, max_size=260),
    ),
    st.builds(lambda n, m: "a" * n + "@" + "b" * m + ".com", st.integers(0, 80), st.integers(0, 260)),
)


def _accepted(model: type[BaseModel], **fields: object) -> bool:
    try:
        model.model_validate(fields)
    except ValidationError:
        return False
    return True


@given(ADDRESSES)
def test_an_address_the_api_accepts_every_service_downstream_accepts(address: str) -> None:
    order = {"lines": [{"sku": "sku-filter", "quantity": 1}], "payment_method": "pm_card_visa"}
    if not _accepted(OrderIn, customer_email=address, **order):
        return
    assert len(address) <= 254 and email_problem(address) is None
    assert _accepted(MessageIn, recipient=address, subject="Your order is confirmed", body="Thanks")
    placed = {"order_id": "o-1", "payment_method": "pm_card_visa", "amount_cents": 700, **order}
    assert _accepted(contract.OrderPlacedPayload, customer_email=address, **placed)
    authorized = {"order_id": "o-1", "attempt": 1, "charge_id": "ch_1", "amount_cents": 700}
    assert _accepted(contract.PaymentAuthorizedPayload, customer_email=address, **authorized)


def test_the_largest_order_the_api_accepts_is_a_charge_the_provider_accepts() -> None:
    most = max(product.price_cents for product in contract.CATALOG.values()) * MAX_QUANTITY * MAX_LINES
    assert most <= MAX_AMOUNT_CENTS
    assert _accepted(ChargeIn, order_id="o-1", amount_cents=most, payment_method="pm_card_visa")


@pytest.mark.parametrize(
    "address",
    ["a" * 64 + "@example.com", "ada.lovelace+tag@mail.example.co.uk", "x@" + ".".join(["b" * 63] * 3) + ".com"],
)
def test_addresses_at_the_rfc_limits_are_accepted_by_all(address: str) -> None:
    assert email_problem(address) is None or len(address) > 254
    if email_problem(address) is None:
        assert _accepted(MessageIn, recipient=address, subject="s", body="b")


@pytest.mark.parametrize(
    "address",
    [
        "a" * 65 + "@example.com",
        "ada@" + "b" * 250 + ".com",
        ".ada@example.com",
        "ada@example",
        "ada@-x.com",
        "a\x00@b.co",
    ],
)
def test_addresses_past_the_limits_are_refused_by_all_with_the_reason(address: str) -> None:
    assert email_problem(address) is not None
    assert not _accepted(MessageIn, recipient=address, subject="s", body="b")


@given(st.text(st.characters(exclude_categories=()), max_size=30))
def test_text_with_nul_surrogates_or_controls_is_refused_where_it_would_break_storage(text: str) -> None:
    broken = "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if broken:
        assert not _accepted(MessageIn, recipient="ada@example.com", subject="s" + text, body=text)
        assert not _accepted(ChargeIn, order_id="o" + text, amount_cents=1, payment_method="pm_card_visa")
