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
# engine's literal search: a cold render redacts every message once. The
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


# The fast path: one expression that proves a text holds nothing any pattern
# could match, so most messages cost a few substring scans in C and no regex at all. Each
# test is a necessary condition of a pattern's match: a literal every match contains
# ("passw" for both password forms), or for the ``[:=]`` of ``password`` and the ``-``
# of three key formats a single character, which ``in`` finds with memchr. The regexes
# are alternatives with a shared first character, which CPython's engine finds faster
# than two substring scans; an alternation of every hint was measured slower than the
# whole exact path (the engine tries each alternative at almost every position).
_AWS_HINT = re.compile(r"A[KS]IA")
_GITHUB_HINT = re.compile(r"gh[pousr]_")
_PASSWORD_HINT = re.compile(r"passw|pwd")
_API_KEY_HINT = re.compile(r"api_?key")


def _clean(text: str) -> bool:
    """True only when no pattern can match ``text``; False means "run the patterns"."""
    if "-" in text and ("k-" in text or "xox" in text or "PRIVATE KEY-----" in text):
        return False
    if _AWS_HINT.search(text) is not None:
        return False
    if "_" in text and _GITHUB_HINT.search(text) is not None:
        return False
    if not text.isascii():
        return False  # Unicode case folding: U+017F matches "s" under (?i); no shortcut
    lowered = text.lower()
    if "bearer" in lowered:
        return False
    if "=" not in text and ":" not in text:
        return True
    return not (
        "secret" in lowered
        or "token" in lowered
        or _PASSWORD_HINT.search(lowered) is not None
        or _API_KEY_HINT.search(lowered) is not None
    )


def redact(text: str) -> tuple[str, int]:
    """Return ``text`` with credentials replaced, and how many were replaced."""
    if _clean(text):
        return text, 0
    return _redact(text)


def _redact(text: str) -> tuple[str, int]:
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
