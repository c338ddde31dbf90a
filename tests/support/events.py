"""The event builders, from the product's devstack (``devstack/events.py``), under the
name the tests import."""

from devstack.events import assistant, make, outcome, question_round, run_started_event, user

__all__ = ["assistant", "make", "outcome", "question_round", "run_started_event", "user"]
