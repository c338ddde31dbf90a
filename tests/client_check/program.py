"""A client of the Prepare API written against the client generated from
docs/openapi.json (tests/client_check/run.sh): publish a release, open a session, start a
run, prepare, read a source record back. Type-checked, never run: a field whose published
type changes breaks the check."""

from __future__ import annotations

from agentloom_client import AuthenticatedClient
from agentloom_client.api.default import (
    open_session_v1_sessions_post as open_session,
)
from agentloom_client.api.default import (
    prepare_v1_sessions_session_id_runs_run_id_prepare_post as prepare,
)
from agentloom_client.api.default import (
    read_record_v1_sessions_session_id_records_record_id_get as read_record,
)
from agentloom_client.api.default import (
    register_release_v1_releases_post as register_release,
)
from agentloom_client.api.default import (
    start_run_v1_sessions_session_id_runs_post as start_run,
)
from agentloom_client.models import (
    PreparedContext,
    PrepareIn,
    RecordPage,
    ReleaseIn,
    ReleaseInModelProfile,
    ReleasePublished,
    RunIn,
    RunStarted,
    Session,
    SessionIn,
)


def published(client: AuthenticatedClient) -> ReleasePublished:
    profile = ReleaseInModelProfile.from_dict({"name": "m", "context_capacity": 8000})
    body = ReleaseIn(agent_id="agent", instructions="Answer.", model_profile=profile)
    out = register_release.sync(client=client, body=body)
    if not isinstance(out, ReleasePublished):
        raise SystemExit(f"publish refused: {out}")
    budget: int = out.input_budget
    revision: str = out.policy_revision
    print(out.release_id, revision, budget)
    return out


def opened(client: AuthenticatedClient, release_id: str) -> Session:
    out = open_session.sync(client=client, body=SessionIn(release_id=release_id))
    if not isinstance(out, Session):
        raise SystemExit(f"open refused: {out}")
    steps: int = out.model_steps
    active: str | None = out.active_run_id
    print(out.session_id, steps, active)
    return out


def started(client: AuthenticatedClient, session_id: str) -> RunStarted:
    out = start_run.sync(session_id, client=client, body=RunIn())
    if not isinstance(out, RunStarted):
        raise SystemExit(f"start refused: {out}")
    snapshot: int = out.snapshot.snapshot_id
    through: int = out.snapshot.through_session_sequence
    print(out.run_id, out.instance_id, snapshot, through)
    return out


def prepared(client: AuthenticatedClient, session_id: str, run_id: str) -> PreparedContext:
    out = prepare.sync(session_id, run_id, client=client, body=PrepareIn(render=True))
    if not isinstance(out, PreparedContext):
        raise SystemExit(f"prepare refused: {out}")
    free: int = out.budget.input_budget - out.budget.estimated_input
    ratio: float = out.budget.ratio
    watermark: int = out.dependency_versions.through_session_sequence
    summary: str | None = out.dependency_versions.summary_id
    if out.provider is not None:
        fmt: str = out.provider.format_
        print(fmt, sorted(out.provider.request.to_dict()))
    for block in out.protected_block_manifest:
        sources: list[str] = block.source_ids
        print(block.block_id, block.authority, sources)
    print(out.prepared_id, free, ratio, watermark, summary, len(out.messages))
    return out


def read_back(client: AuthenticatedClient, session_id: str, record_id: str) -> str:
    text, offset = "", 0
    while True:
        page = read_record.sync(session_id, record_id, client=client, offset=offset, limit=4096)
        if not isinstance(page, RecordPage):
            raise SystemExit(f"read refused: {page}")
        text += page.content
        total: int = page.total_chars
        if page.next_offset is None or len(text) >= total:
            return text
        offset = page.next_offset


def main(base_url: str, key: str) -> None:
    with AuthenticatedClient(base_url=base_url, token=key) as client:
        release = published(client)
        session = opened(client, release.release_id)
        run = started(client, session.session_id)
        context = prepared(client, session.session_id, run.run_id)
        sources = [s for b in context.protected_block_manifest for s in b.source_ids]
        if sources:
            print(read_back(client, session.session_id, sources[0])[:80])


if __name__ == "__main__":
    import sys

    main(sys.argv[1], sys.argv[2])
