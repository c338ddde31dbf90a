"""Conftest for the langchain sdist's own ``SummarizationMiddleware`` tests (``make
peer-tests``, copied next to their renamed ``lc_tests`` package by deploy/peer-tests.sh):
every ``SummarizationMiddleware(...)`` a test makes is an ``AgentLoomMiddleware`` on the
real stack (our fixtures: Kafka, PostgreSQL, processor, Prepare, compaction) — the one-line
switch a user makes. Its arguments (summary model, trigger, keep) are dropped: the
release's context policy applies.

A test applies when it drives a ``create_agent`` agent and asserts what its user sees.
Most of the file calls ``SummarizationMiddleware``'s own methods (``before_model``,
``_create_summary``, the cutoff search, trigger parsing) and asserts their internals; those
do not apply, each with its reason below. What they protect for the user — tool pairs
whole, the question verbatim, a summary, the budget — is asserted for ours through the real
stack in tests/integrations/test_langchain.py (the #38352 case). A test not listed here
runs with ours, so a new upstream test fails rather than hides.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from services.integrations.connection import AgentLoomConnection
from services.integrations.langchain import AgentLoomMiddleware
from tests.conftest import pg_dsn, services, stack  # noqa: F401  (our real-stack fixtures)
from tests.peer.shared import agentloom, deselect_not_applicable  # noqa: F401  (a fixture)

STATE_UPDATE = (
    "asserts before_model's state update (RemoveMessage, a summary HumanMessage, the kept "
    "tail, its cutoff around tool pairs); ours leaves the graph state alone and replaces "
    "each model request with the prepared context"
)
TRIGGER = (
    "SummarizationMiddleware's trigger/keep options (token or message counts, fractions "
    "of a model profile, AND/OR clauses, reported usage); ours follows the release's "
    "context policy"
)
SUMMARY_CALL = (
    "its in-turn summary call (summary model, prompt, retries, overflow, failures); ours "
    "summarizes in the compaction service, off the agent's turn"
)
SUMMARY_IN_STATE = (
    "expects the summary written into the graph state and streamed as a HumanMessage; "
    "ours puts it in the model request only"
)
SUMMARY_FAILS_TURN = (
    "expects a failing summary model to fail the turn; ours has no summary call in the "
    "turn (a failed compaction leaves the previous context)"
)

NOT_APPLICABLE: dict[str, str] = {
    **dict.fromkeys(
        [
            "test_summarization_middleware_no_summarization_cases",
            "test_summarization_middleware_helper_methods",
            "test_summarization_middleware_token_retention_preserves_ai_tool_pairs",
            "test_summarization_middleware_full_workflow",
            "test_summarization_middleware_full_workflow_async",
            "test_summarization_middleware_keep_messages",
            "test_summarization_middleware_binary_search_edge_cases",
            "test_summarization_middleware_find_safe_cutoff_point",
            "test_summarization_middleware_find_safe_cutoff_point_orphan_tool",
            "test_summarization_cutoff_moves_backward_to_include_ai_message",
            "test_summarization_middleware_cutoff_at_boundary",
            "test_summarization_middleware_skips_when_no_safe_cutoff",
            "test_summarization_middleware_skips_when_no_safe_cutoff_async",
            "test_summarization_middleware_many_parallel_tool_calls_safety",
            "test_summarization_before_model_uses_unscaled_tokens_for_cutoff",
            "test_summarization_middleware_find_safe_cutoff_preserves_ai_tool_pair",
            "test_summarization_middleware_cutoff_at_start_of_tool_sequence",
        ],
        STATE_UPDATE,
    ),
    **dict.fromkeys(
        [
            "test_summarization_middleware_initialization",
            "test_summarization_middleware_profile_inference_triggers_summary",
            "test_summarization_middleware_missing_profile",
            "test_summarization_middleware_validation_edge_cases",
            "test_summarization_middleware_multiple_triggers",
            "test_summarization_middleware_profile_edge_cases",
            "test_summarization_middleware_zero_and_negative_target_tokens",
            "test_summarization_middleware_deprecated_parameters_with_defaults",
            "test_summarization_middleware_fraction_trigger_with_no_profile",
            "test_summarization_adjust_token_counts",
            "test_trigger_copies_mutable_inputs",
            "test_trigger_clauses_are_canonical_representation",
            "test_trigger_conditions_legacy_tuple_view_remove_in_2_0",
            "test_compound_trigger_has_no_legacy_tuple_projection",
            "test_and_trigger_conditions",
            "test_or_trigger_conditions_with_and_clauses",
            "test_and_trigger_conditions_async",
            "test_or_trigger_conditions_with_and_clauses_async",
            "test_backward_compatibility_tuple_trigger",
            "test_mixed_and_or_conditions",
            "test_fraction_in_and_trigger",
            "test_trigger_validation_errors",
            "test_empty_and_condition",
            "test_empty_list_trigger_never_summarizes",
            "test_reported_tokens_satisfy_tokens_within_and_clause",
            "test_three_metric_and_clause",
            "test_tokens_and_fraction_and_clause",
            "test_usage_metadata_trigger",
            "test_provider_matches",
            "test_reported_tokens_trigger_for_aliased_provider",
            "test_reported_tokens_trigger_for_fraction",
        ],
        TRIGGER,
    ),
    **dict.fromkeys(
        [
            "test_summarization_middleware_summary_creation",
            "test_summarization_middleware_retries_transient_failure_in_call",
            "test_create_summary_raises_on_failure",
            "test_acreate_summary_raises_on_failure",
            "test_create_summary_does_not_retry_non_retryable_errors",
            "test_create_summary_recovers_from_context_overflow",
            "test_acreate_summary_recovers_from_context_overflow",
            "test_create_summary_raises_on_persistent_context_overflow",
            "test_summarization_middleware_before_model_raises_on_summary_failure",
            "test_summarization_middleware_abefore_model_raises_on_summary_failure",
            "test_summarization_middleware_trim_limit_none_keeps_all_messages",
            "test_summarization_middleware_trim_messages_error_fallback",
            "test_summarization_middleware_async_error_handling",
            "test_create_summary_uses_get_buffer_string_format",
            "test_create_summary_preserves_image_urls",
            "test_create_summary_marks_its_call_internal",
            "test_summarizer_replaces_model_call",
            "test_summarizer_receives_trimmed_messages",
            "test_summarizer_accepts_runnable_and_gets_summary_call_config",
            "test_summarizer_async",
            "test_summarizer_errors_propagate",
            "test_summarizer_empty_history_skips_summarizer",
            "test_chat_model_summarizer_uses_summary_prompt",
            "test_chat_model_summarizer_async",
            "test_chat_model_summarizer_keeps_profile_of_model",
            "test_string_summarizer_is_resolved_with_init_chat_model",
            "test_chat_model_summarizer_does_not_retry_non_retryable_errors",
            "test_chat_model_summarizer_overflow_budget_uses_summarizer_profile",
            "test_summarizer_non_str_return_raises_type_error",
            "test_summarizer_non_str_return_raises_type_error_async",
            "test_sync_summarizer_on_async_path",
            "test_async_summarizer_on_sync_path_raises",
        ],
        SUMMARY_CALL,
    ),
    "test_summary_call_stays_off_the_messages_stream": SUMMARY_IN_STATE,
    "test_summarization_middleware_e2e_failure_raises_without_corrupting_history": (
        SUMMARY_FAILS_TURN
    ),
}


def _reason(item: pytest.Item) -> str | None:
    return NOT_APPLICABLE.get(getattr(item, "originalname", item.name))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_not_applicable(config, items, "langchain", _reason)


@pytest.fixture(autouse=True)
def _middleware_is_ours(
    request: pytest.FixtureRequest,
    agentloom: AgentLoomConnection,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[None]:
    tag = uuid.uuid4().hex[:8]  # a fresh conversation per middleware made
    made: list[AgentLoomMiddleware] = []

    def middleware(*_: Any, **__: Any) -> AgentLoomMiddleware:
        made.append(AgentLoomMiddleware(f"lc-peer-{tag}-{len(made)}", connection=agentloom))
        return made[-1]

    monkeypatch.setattr(request.module, "SummarizationMiddleware", middleware)
    yield
    # The switch took: every middleware the test made bound a conversation of ours.
    assert made, "the test made no SummarizationMiddleware"
    assert all(m._session is not None for m in made), "a middleware never reached our service"
