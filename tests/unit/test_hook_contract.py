"""R14: one hook contract for Prepare's and the compaction service's hooks — how a spec
loads them, how a binding selects them and how a call is timed out."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest

from domain.policy.sections import HookBinding
from schemas.errors import HookFailed
from services.compaction.bootstrap import load_hooks as load_compaction_hooks
from services.hooks import HookSpecInvalid, bound, call, load
from services.prepare.assembly.prepare_hooks import load_hooks as load_prepare_hooks


class _Hook:
    def __init__(self, name: str = "h", version: str = "1", timeout_s: object = 0.1) -> None:
        self.name, self.version, self.timeout_s = name, version, timeout_s

    async def prepare_before(self, delay: float) -> str:
        await asyncio.sleep(delay)
        return "done"

    async def before(self, ctx: object) -> str:
        raise RuntimeError("boom")


@pytest.fixture
def hook_module() -> types.ModuleType:
    mod = types.ModuleType("alc_test_hooks")
    mod.good = lambda: _Hook()  # type: ignore[attr-defined]
    mod.no_timeout = lambda: _Hook(timeout_s=None)  # type: ignore[attr-defined]
    mod.bool_timeout = lambda: _Hook(timeout_s=True)  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    return mod


@pytest.mark.spec("R14")
def test_both_runners_load_a_spec_the_same_way(hook_module: types.ModuleType) -> None:
    spec = f" {hook_module.__name__}:good , "
    assert [h.name for h in load_prepare_hooks(spec).hooks] == ["h"]
    assert [h.name for h in load_compaction_hooks(spec).hooks] == ["h"]


@pytest.mark.spec("R14")
@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("no_colon", "not module:factory"),
        ("alc_test_hooks:", "not module:factory"),
        ("alc_test_hooks:absent", "cannot be loaded"),
        ("alc_no_such_module:f", "cannot be loaded"),
        ("alc_test_hooks:no_timeout", "positive timeout_s"),
        ("alc_test_hooks:bool_timeout", "positive timeout_s"),
    ],
)
def test_a_bad_spec_stops_the_process_naming_the_entry(
    hook_module: types.ModuleType, entry: str, says: str
) -> None:
    for loader in (load_prepare_hooks, load_compaction_hooks):
        with pytest.raises(HookSpecInvalid) as err:
            loader(entry)
        assert says in str(err.value) and entry in str(err.value)
    with pytest.raises(SystemExit):
        load(entry, "x")


@pytest.mark.spec("R14", "R17")
def test_a_binding_selects_by_name_and_version_in_binding_order() -> None:
    a, b = _Hook("a", "1"), _Hook("b", "2")
    point = "context.prepare.before"
    bindings = (
        HookBinding(point=point, hook="b", version="2"),
        HookBinding(point=point, hook="a"),
        HookBinding(point="x", hook="a"),
    )
    assert bound((a, b), point, bindings, "prepare_before") == [b, a]
    with pytest.raises(HookFailed) as err:
        bound((a, b), point, (HookBinding(point=point, hook="b", version="3"),), "prepare_before")
    assert err.value.details["reason"] == "hook_not_loaded"
    with pytest.raises(HookFailed):  # loaded and bound, but without the point's method
        bound((a,), point, (HookBinding(point=point, hook="a"),), "model_before")


@pytest.mark.spec("R14")
async def test_a_call_times_out_or_fails_as_hook_failed_with_a_reason() -> None:
    h = _Hook(timeout_s=0.05)
    assert await call(h, "prepare_before", "p", 0) == "done"
    with pytest.raises(HookFailed) as err:
        await call(h, "prepare_before", "p", 1.0)
    assert err.value.details["reason"] == "timeout"
    with pytest.raises(HookFailed) as err:
        await call(h, "before", "p", None)
    assert err.value.details["reason"] == "RuntimeError"
