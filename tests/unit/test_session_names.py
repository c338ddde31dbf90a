"""Session ids are names per space (issue 25, finding 4), on fakes: a name another space
took first gets a server-assigned global id; each space resolves the name to its own
session; another space's global id is not found; a reopen is idempotent."""

from __future__ import annotations

import pytest

from domain.auth import Action, Credential, KeyKind, Principal
from schemas.answers.sessions import Session
from schemas.errors import Conflict, NotFound
from services.prepare.bodies import ReleaseIn, SessionIn
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

A = Principal(Credential("a" * 16, "space-a", KeyKind.HOST), None)
B = Principal(Credential("b" * 16, "space-b", KeyKind.HOST), None)


async def world() -> PrepareWorld:
    w = PrepareWorld()
    for space in ("space-a", "space-b"):
        body = {"release_id": f"rel-{space}", "agent_id": "a", "instructions": "Answer."}
        await w.svc.releases.register(
            ReleaseIn.model_validate(body | {"model_profile": PROFILE}), space
        )
    return w


async def open_in(w: PrepareWorld, space: str, name: str, actor: str = "alice") -> Session:
    body = SessionIn(session_id=name, release_id=f"rel-{space}")
    return await w.svc.runs.open_session(body, space, actor)


@pytest.mark.spec("R1.4", "R16")
async def test_a_name_another_space_took_is_this_spaces_own_session() -> None:
    w = await world()
    theirs = await open_in(w, "space-b", "conv-1")
    mine = await open_in(w, "space-a", "conv-1")
    assert theirs.session_id == "conv-1"  # the first-comer keeps its id as it is
    assert mine.session_id != "conv-1" and mine.session_name == "conv-1"
    assert await open_in(w, "space-a", "conv-1") == mine  # idempotent
    assert (
        await w.svc.access.authorize("conv-1", A, Action.SESSION_READ)
    ).session_id == mine.session_id
    assert (await w.svc.access.authorize("conv-1", B, Action.SESSION_READ)).session_id == "conv-1"
    # The global id works too, in its own space only; elsewhere it is not found.
    assert (
        await w.svc.access.authorize(mine.session_id, A, Action.SESSION_READ)
    ).space_id == "space-a"
    with pytest.raises(NotFound) as exc:
        await w.svc.access.authorize(mine.session_id, B, Action.SESSION_READ)
    assert "space-a" not in exc.value.message and "alice" not in exc.value.message
    with pytest.raises(Conflict):  # the name is the space's: another owner is refused
        await open_in(w, "space-a", "conv-1", actor="bob")


@pytest.mark.spec("R1.4")
async def test_an_id_the_api_returned_always_means_its_own_session() -> None:
    """The SDK sends the returned (global) id: a later session named like it in the same
    space cannot take it over — opening that name is opening that session."""
    w = await world()
    await open_in(w, "space-b", "conv-2")
    other = await open_in(w, "space-a", "conv-2")  # server-assigned global id
    assert await open_in(w, "space-a", other.session_id) == other
    with pytest.raises(Conflict):
        await open_in(w, "space-a", other.session_id, actor="bob")
    got = await w.svc.access.authorize(other.session_id, A, Action.SESSION_READ)
    assert got.session_id == other.session_id
