"""A prepared context of a priced model profile is stored, and reads back as itself
(R10.5): its prices travel as exact decimals. Before, orjson refused the prices'
``Decimal`` and no priced context was ever stored — so no other Prepare instance could
check its model call, and no summarizer could fork the agent's request (issue 39)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import orjson
import pytest

from domain.pricing import ModelPrices
from services.prepare.assembly.prepared import PreparedEntry
from services.prepare.bodies import PrepareIn
from tests.unit.test_prepare_scaleout import instance_a

PRICES = ModelPrices("3", "15", cached_input="0.3", cache_write="3.75", cache_write_1h="6")


@pytest.mark.spec("R10.5", "R18")
async def test_a_priced_context_is_stored_and_reads_back_with_its_exact_prices() -> None:
    a = await instance_a()
    prepared = await a.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="completion"))
    held = await a.svc.gateway.prepared.get(prepared.prepared_id)
    assert held is not None
    priced = dataclasses.replace(held, profile=dataclasses.replace(held.profile, prices=PRICES))
    stored = priced.to_json()
    assert orjson.loads(stored)["profile"]["prices"]["cached_input"] == 0.3
    back = PreparedEntry.from_json(stored)
    assert back == priced and back.profile.prices == PRICES
    assert back.profile.prices is not None and back.profile.prices.cached_input == Decimal("0.3")
