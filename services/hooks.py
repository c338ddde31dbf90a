"""The hook contract both hook runners share (R14): Prepare's ``context.prepare.*`` and
``model.chat.*`` points (services/prepare/assembly/prepare_hooks.py) and the compaction service's
``context.compact.*`` points (services/compaction/compact_hooks.py).

- A deployment loads hooks from a ``module:factory,...`` spec (``ALC_PREPARE_HOOKS``,
  ``ALC_COMPACTION_HOOKS``); each factory returns an object with ``name``, ``version`` and
  a positive ``timeout_s``. A malformed spec or a hook without them stops the process at
  start with a message naming the entry, never at the first call.
- A release binds hooks by id (``name@version``, or ``name`` for the loaded version);
  at each point exactly the bound hooks run, in binding order. A binding no loaded hook
  answers fails the call or job (``hook_failed``, reason ``hook_not_loaded``).
- Every hook method runs under the hook's own timeout; a timeout or an exception becomes
  ``HookFailed`` with reason ``timeout`` or the exception's type name.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Sequence
from typing import Any

from domain.policy.sections import HookBinding
from schemas.errors import ContextError, HookFailed

log = logging.getLogger("agentloom.hooks")


class HookSpecInvalid(SystemExit):
    """A hook spec entry that cannot be loaded: the process does not start."""


def hook_id(h: Any) -> str:
    return f"{h.name}@{h.version}"


def load(spec: str, kind: str) -> tuple[Any, ...]:
    """The hooks a ``module:factory,...`` spec names, each checked for the contract."""
    hooks = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        module, sep, attr = entry.partition(":")
        if not (module and sep and attr):
            raise HookSpecInvalid(f"{kind} hook entry {entry!r} is not module:factory")
        try:
            hook = getattr(importlib.import_module(module), attr)()
        except (ImportError, AttributeError) as exc:
            raise HookSpecInvalid(f"{kind} hook entry {entry!r} cannot be loaded: {exc}") from exc
        timeout = getattr(hook, "timeout_s", None)
        if not (hasattr(hook, "name") and hasattr(hook, "version")):
            raise HookSpecInvalid(f"{kind} hook {entry!r} has no name and version")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise HookSpecInvalid(f"{kind} hook {entry!r} needs a positive timeout_s")
        log.info("%s hook %s loaded from %s", kind, hook_id(hook), entry)
        hooks.append(hook)
    return tuple(hooks)


def answers(h: Any, b: HookBinding) -> bool:
    """A loaded hook answers a binding: same name, and the bound version if one is given
    (an unversioned binding takes the loaded version, as publish accepts it)."""
    return bool(h.name == b.hook and (b.version is None or str(h.version) == b.version))


def bound(
    hooks: Sequence[Any], point: str, bindings: Sequence[HookBinding], method: str
) -> list[Any]:
    """The loaded hooks implementing ``method`` that the release binds at ``point``, in
    binding order; a binding none of them answers raises ``HookFailed``."""
    out = []
    for b in bindings:
        if b.point != point:
            continue
        h = next((h for h in hooks if answers(h, b) and hasattr(h, method)), None)
        if h is None:
            raise HookFailed(
                f"the release binds hook {b.hook_id} at {point}, which this deployment"
                f" does not load (loaded: {', '.join(map(hook_id, hooks)) or 'none'})",
                hook=b.hook_id,
                point=point,
                reason="hook_not_loaded",
                loaded=[hook_id(h) for h in hooks],
            )
        out.append(h)
    return out


async def call(h: Any, method: str, point: str, *args: Any) -> Any:
    """``h.method(*args)`` under the hook's timeout; its failure as ``HookFailed``."""
    try:
        return await asyncio.wait_for(getattr(h, method)(*args), float(h.timeout_s))
    except ContextError:
        raise
    except TimeoutError as exc:
        raise HookFailed(
            f"hook {hook_id(h)} timed out at {point}",
            hook=hook_id(h),
            point=point,
            reason="timeout",
            timeout_s=h.timeout_s,
        ) from exc
    except Exception as exc:
        raise HookFailed(
            f"hook {hook_id(h)} failed at {point}: {type(exc).__name__}",
            hook=hook_id(h),
            point=point,
            reason=type(exc).__name__,
        ) from exc
