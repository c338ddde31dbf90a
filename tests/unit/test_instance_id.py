"""Instance ids are unique per live process and stable across a restart (issue 13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streams.instance import claim_instance_id

ROOT = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys, time; from pathlib import Path; from streams.instance import claim_instance_id;"
    "print(claim_instance_id('processor', Path(sys.argv[1])), flush=True); time.sleep(60)"
)


def _hold(state: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_explicit_id_wins(tmp_path: Path) -> None:
    assert claim_instance_id("processor", tmp_path, "proc-a") == "proc-a"
    assert not (tmp_path / "instances").exists()


def test_two_live_processes_get_different_ids_and_a_restart_gets_its_own_back(
    tmp_path: Path,
) -> None:
    first, first_id = _hold(tmp_path)
    second, second_id = _hold(tmp_path)
    try:
        assert first_id.endswith("-processor-1")
        assert second_id.endswith("-processor-2")
        first.kill()  # like kill -9: the kernel drops the lock
        first.wait()
        again, again_id = _hold(tmp_path)
        again.kill()
        again.wait()
        assert again_id == first_id
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_roles_have_their_own_slots(tmp_path: Path) -> None:
    proc, held = _hold(tmp_path)
    try:
        assert claim_instance_id("compaction", tmp_path).endswith("-compaction-1")
        assert held.endswith("-processor-1")
    finally:
        proc.kill()
        proc.wait()
