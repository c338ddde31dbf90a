"""Profiles of our services under a benchmark's load, with py-spy (a sampling profiler
that attaches to a running process; ``pip install py-spy``): its collapsed stacks
(``--format raw``) per service, a flame graph drawn from them (SVG, root at the top) and
the functions that take the most samples, by their own time and with what they call.

``Recorder.start`` attaches to each process for a fixed duration (``--nonblocking``: the
target is never paused; ``--subprocesses`` where asked: the processor's offloaded child);
``Recorder.finish`` waits for them and writes ``<prefix>-<name>.{raw,svg,txt}``.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

LINE = re.compile(r":\d+\)$")  # a frame's line number: functions are summed over lines


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@dataclass
class Recorder:
    out: Path
    prefix: str
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self, pids: dict[str, int], seconds: float, children: tuple[str, ...] = (), rate: int = 67
    ) -> list[str]:
        """Attach to each of ``pids`` (to its child processes too for the names in
        ``children``); returns the names it could not profile."""
        exe = py_spy()
        if exe is None:
            return list(pids)
        self.out.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            argv = [exe, "record", "--nonblocking", "--format", "raw"]
            if name in children:
                argv.append("--subprocesses")
            argv += ["-r", str(rate), "-d", str(max(1, round(seconds))), "-p", str(pid)]
            argv += ["-o", str(self._path(name, "raw"))]
            self.running[name] = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        return []

    def finish(self, timeout: float = 60) -> dict[str, str]:
        """Wait for the recordings; write each one's SVG and top list. Returns the top
        lists' first lines per name."""
        heads = {}
        for name, proc in self.running.items():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
            raw = self._path(name, "raw")
            if not raw.exists():
                continue
            stacks = parse(raw.read_text())
            self._path(name, "svg").write_text(svg(stacks, f"{self.prefix} {name}"))
            text = top(stacks)
            self._path(name, "txt").write_text(text)
            heads[name] = "\n".join(text.splitlines()[:12])
        self.running.clear()
        return heads

    def _path(self, name: str, ext: str) -> Path:
        return self.out / f"{self.prefix}-{name}.{ext}"


def parse(text: str) -> Counter[tuple[str, ...]]:
    """Collapsed stacks (``a;b;c N`` a line) as stack -> samples."""
    out: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out[tuple(stack.split(";"))] += int(n)
    return out


def top(stacks: Counter[tuple[str, ...]], n: int = 30) -> str:
    """The functions with the most samples: on their own (the stack's last frame) and
    inclusive (anywhere on the stack, once a stack), as shares of all samples."""
    total = sum(stacks.values()) or 1
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for stack, k in stacks.items():
        frames = [LINE.sub(")", f) for f in stack]
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    lines = [f"{total} samples", "", "own time:"]
    lines += [f"{v / total:6.1%}  {f}" for f, v in own.most_common(n)]
    lines += ["", "inclusive:"]
    lines += [f"{v / total:6.1%}  {f}" for f, v in incl.most_common(n)]
    return "\n".join(lines) + "\n"


@dataclass
class _Node:
    name: str
    count: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def svg(stacks: Counter[tuple[str, ...]], title: str, width: int = 1400) -> str:
    """A flame graph (root at the top, each frame as wide as its samples)."""
    root = _Node("all")
    for stack, k in stacks.items():
        node = root
        node.count += k
        for f in stack:
            node = node.children.setdefault(f, _Node(f))
            node.count += k
    rects: list[str] = []
    scale = width / max(root.count, 1)
    depth = _draw(root, 0.0, 0, scale, root.count, rects)
    h = 24 + 16 * (depth + 1)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}"'
        ' font-family="monospace" font-size="11">'
        f'<text x="4" y="14">{html.escape(title)}: {root.count} samples</text>'
    )
    return head + "".join(rects) + "</svg>\n"


def _draw(node: _Node, x: float, depth: int, scale: float, total: int, out: list[str]) -> int:
    w = node.count * scale
    if w < 0.5:
        return depth - 1
    y = 20 + 16 * depth
    hue = 20 + zlib.crc32(node.name.split(" (")[0].encode()) % 40
    label = html.escape(node.name)
    share = f"{node.count / total:.1%}"
    text = html.escape(node.name[: int(w / 7)]) if w > 30 else ""
    out.append(
        f"<g><title>{label} ({node.count} samples, {share})</title>"
        f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="15" fill="hsl({hue},90%,60%)"/>'
        f'<text x="{x + 2:.1f}" y="{y + 11}">{text}</text></g>'
    )
    deepest = depth
    for child in sorted(node.children.values(), key=lambda c: c.name):
        deepest = max(deepest, _draw(child, x, depth + 1, scale, total, out))
        x += child.count * scale
    return deepest
