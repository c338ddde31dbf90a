"""The lines of a tool's output that carry signal, told by their structure. Pure.

An error shows in the shape of a line, whatever language the session speaks: a Python
traceback (``Traceback (most recent call last):``, ``File "…", line N`` frames, the
exception line that ends it), an exception line (an exception class name at the start
of a line, then ``:``), test runners' markers (pytest's ``E   `` detail lines,
``FAILED``/``ERROR`` summary lines and the ``=== … ===`` verdict, Go's ``--- FAIL:``),
compiler and CLI diagnostics (``path:12:5: error``, ``error[E0308]:``, ``fatal:``,
``npm ERR!``), a log line's ``ERROR``/``FATAL`` level, a non-zero exit code. A source
listing that mentions an exception (``except AttributeError:``, ``raise ValueError(…)``)
is none of these shapes; a tool's own error status is (``extractive``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from domain.compaction.extractive.pruned import Alt, Pruned

TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
FRAME = re.compile(r'^\s*File "[^"\n]+", line \d+')
# A traceback's last line and every exception line: a class name at the line's start.
EXCEPTION = re.compile(r"^(?:E\s+)?(?:[^\W\d]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|\s*$)")
# The shapes a signal line starts with (matched at its start only). Case matters:
# "ERROR" is a log level, "error" in prose a word.
SIGNAL_START = re.compile(
    r"E\s{2,}\S"  # pytest: the failing assertion's detail
    r"|(?:FAILED|ERROR|FAIL|PANIC)[\s:]"  # pytest short summary, Go, generic markers
    r"|=+ .*\d.* =+$"  # pytest's verdict: "=== 1 failed, 119 passed in 4.2s ==="
    r"|_{3,} .+ _{3,}$"  # pytest: the header of a failing test's report
    r"|--- FAIL\b|panic: |fatal: |npm ERR!"
    r"|(?:\S+:\d+(?::\d+)?: )?(?:fatal )?error(?:\[\w+\])?:"  # compilers, rustc, CLIs
    r"|Error: |thread '.*' panicked at "
    r"|\[exit(?: code)? -?[1-9]\d*\]"
)
# The shapes found anywhere in a line. Each holds one of ``_ANYWHERE_HOLDS``: a line
# without any is not searched (a search tries every position of the line).
SIGNAL_ANYWHERE = re.compile(
    r"(?:^|[\s\[|])(?:ERROR|FATAL|CRITICAL)(?=[\s:\]|])"  # a log line's level
    r"|: command not found$|: No such file or directory$"  # sh, coreutils (C locale)
    r"|\breturned non-zero exit status\b"
)
_ANYWHERE_HOLDS = ("ERROR", "FATAL", "CRITICAL", ": command not found",
                   ": No such file or directory", "returned non-zero exit status")  # fmt: skip
EXIT_NONZERO = re.compile(r"\bexit(?:ed)?(?: with)? (?:code|status)[:= ]+-?[1-9]\d*", re.I)
# An error named inside a line, whatever language the text around it speaks: an
# exception class name (KeyError, ValueError: …) or an HTTP error status.
ERROR_SHAPE = Pruned(
    [
        Alt(r"\b\w+(?:Error|Exception)\b", ("Error|Exception",)),
        Alt(r"\bHTTP(?:/\d(?:\.\d)?)?[ :]+[45]\d\d\b", ("HTTP",)),
    ]
)
MAX_FRAMES = 3  # of a traceback: its last frames say where it failed
MAX_LINES = 12  # signal lines per output: the first few and the last ones


def is_signal(line: str) -> bool:
    """An error line by its shape alone (outside a traceback's context)."""
    return bool(
        EXCEPTION.match(line)
        or SIGNAL_START.match(line)
        or (any(h in line for h in _ANYWHERE_HOLDS) and SIGNAL_ANYWHERE.search(line))
        or EXIT_NONZERO.search(line)
        or TRACEBACK.match(line)
    )


def signal_lines(lines: Sequence[str], flags: Sequence[bool] | None = None) -> list[int]:
    """Indices of the lines of one output that carry an error signal, in order: each
    traceback's header, its last ``MAX_FRAMES`` frames (with their source lines) and its
    exception line; every other line ``is_signal`` (``flags``: each line's, when the
    caller has them). At most ``MAX_LINES``, the first
    three and the last ones — a long run's final errors are its verdict."""
    out: list[int] = []
    k = 0
    n = len(lines)
    while k < n:
        line = lines[k]
        if TRACEBACK.match(line):
            out.append(k)
            frames: list[list[int]] = []
            k += 1
            while k < n and (lines[k][:1].isspace() or not lines[k].strip()):
                if FRAME.match(lines[k]):
                    frames.append([k])
                elif frames and lines[k].strip():
                    frames[-1].append(k)
                k += 1
            out.extend(i for f in frames[-MAX_FRAMES:] for i in f)
            if k < n:  # the exception line ends the traceback, whatever its shape
                out.append(k)
                k += 1
            continue
        if flags[k] if flags is not None else is_signal(line):
            out.append(k)
        k += 1
    if len(out) > MAX_LINES:
        out = out[:3] + out[-(MAX_LINES - 3) :]
    return out


def error_shaped(text: str) -> bool:
    """``text`` is shaped as an error: it names one (``ERROR_SHAPE``), or one of its
    lines is an error line (``is_signal``)."""
    return ERROR_SHAPE.search(text) is not None or any(is_signal(ln) for ln in text.splitlines())
