"""Prepare-side hooks (R14): ``context.prepare.before/after`` and ``model.chat.before/after``.

A hook is any object with ``name``, ``version``, ``timeout_s`` and one or more of the
methods below; the registry calls each method under the hook's own timeout. What a hook
adds is temporary — tagged with ``hook:<name>@<version>`` as its source, never written to
history — and bounded: ``model.chat.before`` output is checked against the protected
block manifest (domain/gate.py) after every hook, so a hook cannot remove, alter or
downgrade a required block. ``*.after`` hooks are read-only: they get copies, and their
failure is logged, never fatal. A failing ``before`` hook fails the call: nothing is sent
on a context nobody checked (``hook_failed``).

Which hooks run is the call's release's choice (R14, R17, R1.4): at each point, exactly
the hooks its policy's ``hook_bindings`` bind there (services/hooks.py, the contract both
hook runners share). Publish refuses unknown ids, so a binding no loaded hook answers is a
deployment that stopped loading a bound hook: the call fails (``hook_not_loaded``).

Configured with ``ALC_PREPARE_HOOKS="module:factory,..."`` (see README).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.context.assemble import Material
from domain.gate import HookEffect, apply_hook
from domain.policy.sections import HookBinding
from schemas.answers.prepared import ProtectedBlock
from schemas.errors import Conflict, HookFailed
from services.hooks import bound, hook_id, load
from services.hooks import call as call_hook

log = logging.getLogger("agentloom.prepare.hooks")
Message = dict[str, Any]
Bindings = Sequence[HookBinding]
# R14: the points Prepare serves, and the hook method each calls.
METHODS = {
    "context.prepare.before": "prepare_before",
    "context.prepare.after": "prepare_after",
    "model.chat.before": "model_before",
    "model.chat.after": "model_after",
}


@dataclass(frozen=True)
class PrepareRequest:
    """What ``context.prepare.before`` sees: who prepares, for what, with which material."""

    session_id: str
    run_id: str
    instance_id: str
    purpose: str
    material: tuple[Material, ...]


@dataclass(frozen=True)
class PrepareAdjust:
    """``context.prepare.before``: add authorized material, drop optional material by
    citation id, or reject the prepare with a reason."""

    add_material: tuple[Mapping[str, Any], ...] = ()
    drop_citations: frozenset[str] = frozenset()
    reject: str | None = None


@dataclass(frozen=True)
class HookCall:
    """What ``model.chat.before/after`` hooks see of a model call (its budget as the
    report's JSON)."""

    session_id: str
    run_id: str
    instance_id: str
    prepared_id: str
    purpose: str
    tools: tuple[Mapping[str, Any], ...]
    budget: Mapping[str, Any]


hook_source = hook_id


@dataclass
class HookRegistry:
    hooks: Sequence[Any] = field(default_factory=tuple)

    def bound(self, point: str, bindings: Bindings) -> list[Any]:
        """The hooks the release binds at ``point``, in binding order. A binding that no
        loaded hook implementing the point answers fails the call, clearly."""
        return bound(self.hooks, point, bindings, METHODS[point])

    def check(self, bindings: Bindings) -> None:
        """Every Prepare-side binding answered by a loaded hook, or the call fails here
        (at prepare) rather than later at a read-only point, where it is only logged."""
        for point in METHODS:
            self.bound(point, bindings)

    async def _call(self, h: Any, method: str, *args: Any) -> Any:
        return await call_hook(h, method, method, *args)

    async def prepare_before(self, req: PrepareRequest, bindings: Bindings) -> tuple[Material, ...]:
        material = list(req.material)
        for h in self.bound("context.prepare.before", bindings):
            adj: PrepareAdjust = await self._call(h, "prepare_before", req)
            if adj.reject:
                raise Conflict(
                    f"hook {hook_source(h)} rejected the prepare: {adj.reject}",
                    reason="rejected_by_hook",
                    hook=hook_source(h),
                )
            # Only optional material may be dropped; the hook can't reach anything else.
            material = [m for m in material if m.citation_id not in adj.drop_citations]
            material.extend(
                Material.from_dict(d, origin=f"hook:{hook_source(h)}") for d in adj.add_material
            )
        return tuple(material)

    async def prepare_after(self, prepared: Mapping[str, Any], bindings: Bindings) -> None:
        await self._read_only("context.prepare.after", bindings, prepared)

    async def model_before(
        self,
        call: HookCall,
        messages: list[Message],
        manifest: Sequence[ProtectedBlock],
        count: Callable[[str], int],
        overhead: int,
        bindings: Bindings,
    ) -> tuple[list[Message], int, int, list[str]]:
        """Each hook gets a copy and returns the messages to send; each result is checked
        against the manifest before the next hook runs."""
        added = removed = 0
        used: list[str] = []
        for h in self.bound("model.chat.before", bindings):
            # A deep copy: the messages are shared with the cached thread view.
            out = await self._call(h, "model_before", call, copy.deepcopy(messages))
            eff: HookEffect = apply_hook(
                f"hook:{hook_source(h)}", messages, list(out), manifest, count, overhead
            )
            messages, added, removed = (
                eff.messages,
                added + eff.added_tokens,
                removed + (eff.removed_tokens),
            )
            used.append(hook_source(h))
        return messages, added, removed, used

    async def model_after(
        self, call: HookCall, response: Mapping[str, Any], bindings: Bindings
    ) -> None:
        await self._read_only("model.chat.after", bindings, call, response)

    async def _read_only(self, point: str, bindings: Bindings, *args: Any) -> None:
        try:
            hooks = self.bound(point, bindings)
        except HookFailed as exc:  # read-only: the result stands; the gap is logged
            log.warning("%s (ignored: read-only point)", exc.message)
            return
        for h in hooks:
            try:
                await self._call(h, METHODS[point], *(copy.deepcopy(a) for a in args))
            except HookFailed as exc:  # read-only: the result stands, the failure is logged
                log.warning("%s (ignored: read-only hook)", exc.message)


def load_hooks(spec: str) -> HookRegistry:
    return HookRegistry(load(spec, "prepare"))


def hook_ids(spec: str) -> tuple[str, ...]:
    """The ids (``name@version``) of the hooks a ``module:factory,...`` spec loads: how
    Prepare knows the compaction service's hooks (ALC_COMPACTION_HOOKS, the same
    settings every process reads) to refuse a release binding any other (R17)."""
    return tuple(hook_id(h) for h in load(spec, "compaction"))
