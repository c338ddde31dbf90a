"""The session processor's control decisions over a budget observation, pure: the facts
and effects (``effects``) and the decisions (``observation``). Importers name the module
they need; the names are also re-exported here for the importers that still name
``domain.compaction.control``."""

from domain.compaction.control.effects import (
    ControlEffects,
    JobFinish,
    JobRow,
    JobStart,
    LockedState,
    NewJob,
    ObservationInputs,
    ObservationVerdict,
    TriggerReport,
)
from domain.compaction.control.observation import (
    judge_observation,
    observation_effects,
    redelivered,
    request_of,
)

__all__ = [
    "ControlEffects",
    "JobFinish",
    "JobRow",
    "JobStart",
    "LockedState",
    "NewJob",
    "ObservationInputs",
    "ObservationVerdict",
    "TriggerReport",
    "judge_observation",
    "observation_effects",
    "redelivered",
    "request_of",
]
