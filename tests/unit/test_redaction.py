"""R15.4: credentials never enter context."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.context.redaction import redact


@pytest.mark.spec("R15.4")
@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        ("AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        ("sk-proj-abcdefghijklmnopqrstuvwxyz012345", "api_key"),
        ("ghp_" + "a" * 36, "github_token"),
        ("xoxb-1234567890-abcdefghij", "slack_token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "private_key"),
    ],
)
def test_known_credential_formats_are_replaced(secret: str, kind: str) -> None:
    out, n = redact(f"config dump: {secret} (end)")
    assert secret not in out and n == 1
    assert f"[credential redacted: {kind}]" in out


@pytest.mark.spec("R15.4")
def test_password_pairs_keep_the_key_and_drop_the_value() -> None:
    out, n = redact("db: user=app password=hunter2hunter2 host=db")
    assert out == "db: user=app password=[credential redacted] host=db" and n == 1
    assert redact("Authorization: Bearer abcdefghijklmnopqrstuvwxyz.0123")[1] == 1


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_ordinary_text_is_left_alone_and_redaction_is_idempotent(text: str) -> None:
    once, _ = redact(text)
    assert redact(once) == (once, 0)


def test_plain_prose_is_untouched() -> None:
    prose = "The password policy says tokens expire; see docs/security.md for the secret."
    assert redact(prose) == (prose, 0)
