"""The shapes salient things take in agent history, in any script (``\\w`` is Unicode):
file paths, numbers with units or decimals, identifiers, back-quoted and code-style
names, and what an error names. Pure; ``salience`` weighs what they find.

The patterns of several alternatives are ``Pruned``: a text is matched with only the
alternatives whose characters it holds.
"""

from __future__ import annotations

import re

from domain.compaction.extractive.pruned import Alt, Pruned

# Absolute/home/relative paths with 2+ parts, or relative ones with an extension; the
# lookbehind keeps URLs ("https://host/a.html") and ratios ("and/or") out.
PATH = Pruned(
    [
        Alt(r"(?:~|\.{1,2})?/(?:[\w.-]+/)+[\w.-]+", ("/",)),
        Alt(r"(?:[\w-][\w.-]*/)+[\w-][\w-]*\.[^\W_]{1,8}", ("/",)),
        # a bare file name with a common source or config extension: setup.py, ci.yml
        Alt(
            r"[\w-]+\.(?:py|pyi|md|rst|toml|ya?ml|json|ts|tsx|js|jsx|go|rs|java|kt|c|h|cc|cpp"
            r"|hpp|rb|php|sql|cfg|ini|txt|sh|lock|proto|tf|csv|log|html|css)",
            (r"\.",),
        ),
    ],
    before=r"(?<![\w:/.~-])",
    after=r"(?![\w/.-])",
)
UNITS = (
    r"%|ms|µs|us|ns|s|sec|secs|seconds?|mins?|minutes?|h|hrs?|hours?|days?|[KMGT]i?B|bytes?"
    r"|req/s|rps|qps|ops/s|/s|x|tokens?|rows?|records?|items?|files?|lines?|tests?|errors?"
    r"|warnings?|passed|failed|skipped|retries|attempts|calls|requests|users|connections"
    r"|workers|threads|cores|MHz|GHz|kb|mb|gb"
)
# Each pattern starts with its first character's class, then looks back over it: ``re``
# scans for a leading class in C (a leading look back is tried at every position).
_FIRST_DIGIT = r"(?:(?<=[-+])\d|(?<=\d))"  # a sign and its digit, or a digit
MEASURE = re.compile(
    rf"[-+v\d](?<![\w.].)(?:{_FIRST_DIGIT}[\d,]*(?:\.\d+)?\s?(?:{UNITS})(?![\w])"
    rf"|{_FIRST_DIGIT}\d*\.\d+(?![\w.])"  # a decimal: 0.973, 412.7
    r"|(?:(?<=v)\d|(?<=\d))\d*(?:\.\d+){2,}(?![\w.]))"  # a version: 3.11.4
)
INTEGER = re.compile(r"\d(?<![\w.,/-].)(?:\d{0,2}(?:,\d{3})+|\d{2,})(?![\w.,/])")
IDENT = Pruned(
    [
        Alt(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b", (r"\d",)),  # a hash: 3f9a2c1
        Alt(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b", ("[A-Z]", "-")),  # a ticket or code: PAY-4821
        Alt(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", ("[A-Z]", "_")),  # LEDGER_SYNC_TIMEOUT
        Alt(r"\b[A-Z]{1,5}\d{3,6}\b", ("[A-Z]", r"\d")),  # an error code: E4127
        Alt(r"\b[^\W\d_A-Z]\w*[-_][^\W_]*\d\w*\b", ("[-_]", r"\d")),  # acct_81a2, req-77f
    ]
)
QUOTED = re.compile(r"`([^`\n]{2,80})`")
ERROR_NAMES = Pruned(
    [
        Alt(r"'([^'\n]{2,60})'", ("'",)),
        Alt(r'"([^"\n]{2,60})"', ('"',)),
        Alt(r"\b(\w+(?:Error|Exception))\b", ("Error|Exception",)),
    ]
)
# snake_case and CamelCase names (any script: ``[^\W_A-Z]`` is a lower-case letter or digit)
CODE_NAME = Pruned(
    [
        Alt(r"\b[^\W\d_A-Z][^\W_A-Z]*(?:_[^\W_A-Z]+)+\b", ("_",)),
        Alt(r"\b[A-Z][^\W_A-Z]+(?:[A-Z][^\W_A-Z]+)+\b", ("[A-Z]",)),
    ]
)
