"""The worker's merge path, without I/O, over twelve jobs (issue 36): each job's segment
summarized by the built-in extractive summarizer, merged with the parent as stored
(``merge_drafts``), given the authored records' entries (``with_recorded``), fitted to a
tight bound and stored — every recorded decision and question stays verbatim and cited
in every summary, and a question leaves the open list only once its closing is covered.

It pins the wiring the compaction worker uses (``services.compaction.worker._run``)."""

from __future__ import annotations

import json

import pytest

from domain.compaction.authored import keep_recorded, with_recorded
from domain.compaction.bound import fit_draft
from domain.compaction.drafts import SourceItem, SummaryDraft, SummaryRequest
from domain.compaction.extractive import extract_draft
from domain.compaction.sources import merge_drafts

DECISIONS = [
    "Final call: PostgreSQL over SQLite.",
    "采用方案二\uff0c按会话分区。",
    "Wir nehmen Avro statt JSON.",
    "Логи пишем в stderr.",
]


def _count(text: str) -> int:
    return len(text) // 3 + 1


def _job(k: int) -> tuple[SourceItem, ...]:
    """One question's records: the user's request, a decision, a tool round, an answer;
    job 0 opens two questions, job 3 closes the first."""
    seq = k * 100
    items = [
        SourceItem(f"u{k}", seq + 1, "user_input", "user", f"Step {k}: go on with the port."),
        SourceItem(
            f"d{k}",
            seq + 2,
            "decision_recorded",
            "user",
            f"{DECISIONS[k % len(DECISIONS)]} #{k}",
            detail=f"measured {k}",
        ),
    ]
    if k == 0:
        items += [
            SourceItem("qa", seq + 3, "question_opened", "user", "Which port?", question_key="qa"),
            SourceItem("qb", seq + 4, "question_opened", "user", "谁审查\uff1f", question_key="qb"),
        ]
    if k == 3:
        items.append(
            SourceItem(
                "ca", seq + 3, "question_closed", "user", "9093", question_key="qa", detail="9093"
            )
        )
    args = json.dumps({"path": f"src/mod{k}.py"})
    items += [
        SourceItem(
            f"m{k}",
            seq + 5,
            "assistant_message",
            "assistant",
            "Reading.",
            call_id=f"c{k}",
            arguments=(("read_file", args),),
        ),
        SourceItem(
            f"t{k}", seq + 6, "tool_outcome", "tool", "x = 1\n" * 40, "read_file", "ok", f"c{k}"
        ),
        SourceItem(
            f"a{k}", seq + 7, "assistant_message", "assistant", f"Step {k} done, where next?"
        ),
    ]
    return tuple(items)


@pytest.mark.spec("R11.7", "R11.8")
@pytest.mark.parametrize("bound", [400, 4000])
def test_twelve_jobs_keep_recorded_entries_verbatim_and_close_only_what_was_closed(
    bound: int,
) -> None:
    parent: dict[str, object] | None = None
    for k in range(12):
        items = _job(k)
        req = SummaryRequest(items, None, 200, f"op{k}")
        said = [
            (i.record_id, i.session_sequence, i.text)
            for i in items
            if i.kind.endswith(("input", "message"))
        ]
        merged = merge_drafts(parent, [extract_draft(req)], said)
        merged = with_recorded(merged, items, parent)
        rolled = keep_recorded(
            merged, SummaryDraft((), (), (), (), (), ())
        )  # a roll-up that lost all
        assert [f for f in rolled.all_facts()] == [f for f in merged.all_facts() if f.recorded]
        draft, _ = fit_draft(merged, bound, _count)
        stored = SummaryDraft.from_dict(draft.to_dict())
        parent = stored.to_dict()

        recorded = [f for f in stored.decisions if f.recorded]
        assert [f.source_ids for f in recorded] == [(f"d{n}",) for n in range(k + 1)]
        for n, f in enumerate(recorded):
            assert f.statement == f"{DECISIONS[n % len(DECISIONS)]} #{n} (reason: measured {n})"
        assert all(f.source_ids != (f"d{n}",) for f in stored.verified_facts for n in range(k + 1))
        open_keys = [f.key for f in stored.unresolved_questions if f.recorded]
        if k < 3:
            assert open_keys == ["qa", "qb"]
        else:
            assert open_keys == ["qb"]
            (answered,) = [f for f in stored.verified_facts if f.key == "qa"]
            assert answered.statement == "Which port? — answered: 9093"
            assert answered.source_ids == ("qa", "ca") and answered.recorded
        assert "- 谁审查\uff1f [qb]" in stored.text()
