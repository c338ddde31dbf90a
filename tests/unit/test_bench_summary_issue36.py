"""``benchmarks.summary`` reads the issue-36 benchmarks: real transcripts (ours vs masking
at our budget, token share, the user's requests, after roll-ups) and the phrasing-blind
frontier per language; "n/a" when they did not run."""

from __future__ import annotations

from benchmarks.summary import build, markdown

DATA = {
    "real_transcripts": {
        "one_shot": {
            "token_share": {"ours": 0.14},
            "rows": {
                "all facts": {"ours": 0.6, "masking@B": 0.3},
                "kind: request": {"ours": 0.9},
            },
        },
        "after_10_rollups": {"rows": {"all facts": {"ours": 0.5}}},
        "one_shot_same_transcripts": {"rows": {"all facts": {"ours": 0.4}}},
    },
    "frontier_blind": {
        "results": [
            {
                "language": "zh",
                "rows": {"decisions kept": {"ours": 0.95}, "wrongly closed": {"ours": 0.0}},
            }
        ]
    },
}


def test_issue36_rows() -> None:
    rows = {r.measure: r for r in build(DATA)}
    kept = rows["real transcripts: facts kept one-shot, ours vs masking at our budget"]
    assert (kept.value, kept.ratio) == (0.6, 2.0)
    assert rows["real transcripts: summary tokens, share of what it covers"].value == 0.14
    assert rows["real transcripts: the user's requests kept one-shot"].value == 0.9
    late = rows["real transcripts: facts kept after >= 10 roll-ups vs one-shot"]
    assert (late.value, late.ratio) == (0.5, 1.25)
    assert rows["phrasing-blind frontier (zh): decisions kept"].value == 0.95
    assert rows["phrasing-blind frontier (zh): wrongly closed"].value == 0.0
    assert rows["phrasing-blind frontier (zh): open questions kept"].value is None


def test_not_run_gives_na_for_both_languages() -> None:
    rows = build({})
    table = markdown(rows)
    assert "| phrasing-blind frontier (en): decisions kept | n/a |" in table
    assert "| phrasing-blind frontier (zh): answered still open | n/a |" in table
    assert "| real transcripts: the user's requests kept one-shot | n/a |" in table
