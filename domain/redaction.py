"""Credentials never enter context (R15.4). Pure.

Views are rendered with recognisable secrets replaced by a typed placeholder; the
original stays in the immutable store, readable by id by whoever may read it. Patterns
are deliberately specific (known key formats, PEM blocks, ``password=``-style pairs) so
that ordinary text is not mangled.
"""

from __future__ import annotations

import re

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("api_key", re.compile(r"\b(?:sk|rk|pk)-(?:proj-|live-|test-)?[A-Za-z0-9_-]{20,}\b")),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b")),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}")),
    (
        "password",
        re.compile(
            r"(?i)\b(password|passwd|pwd|secret|api_key|apikey|token)\s*[:=]\s*"
            r"(?!\[credential)[^\s,;\"']{4,}"
        ),
    ),
)


# Literals of which every match of the pattern contains one. Most text holds none, and
# a substring test is far cheaper than a regex scan whose leading ``\b`` defeats the
# engine's literal search: a cold render redacts every message once (issue 13). The
# case-insensitive patterns' hints are looked up in the lowered text, and only for ASCII
# text (Unicode case folding has equivalences ``str.lower`` does not reproduce).
_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY-----",),
    "aws_access_key": ("AKIA", "ASIA"),
    "api_key": ("k-",),
    "github_token": ("gh",),
    "slack_token": ("xox",),
}
_FOLDED_HINTS: dict[str, tuple[str, ...]] = {
    "bearer_token": ("bearer",),
    "password": ("password", "passwd", "pwd", "secret", "api_key", "apikey", "token"),
}
_CHECKS = tuple(
    (kind, pattern, _HINTS.get(kind) or _FOLDED_HINTS[kind], kind in _FOLDED_HINTS)
    for kind, pattern in _PATTERNS
)


def redact(text: str) -> tuple[str, int]:
    """Return ``text`` with credentials replaced, and how many were replaced."""
    count = 0
    lowered = text.lower() if text.isascii() else None
    for kind, pattern, hints, folded in _CHECKS:
        hay = lowered if folded else text
        if hay is not None:  # None: not ASCII, no shortcut
            for hint in hints:
                if hint in hay:
                    break
            else:
                continue
        if kind == "password":
            text, n = pattern.subn(lambda m: f"{m.group(1)}=[credential redacted]", text)
        else:
            text, n = pattern.subn(f"[credential redacted: {kind}]", text)
        if n:
            count += n
            lowered = text.lower() if text.isascii() else None
    return text, count
