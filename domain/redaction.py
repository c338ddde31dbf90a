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


def redact(text: str) -> tuple[str, int]:
    """Return ``text`` with credentials replaced, and how many were replaced."""
    count = 0
    for kind, pattern in _PATTERNS:
        if kind == "password":
            text, n = pattern.subn(lambda m: f"{m.group(1)}=[credential redacted]", text)
        else:
            text, n = pattern.subn(f"[credential redacted: {kind}]", text)
        count += n
    return text, count
