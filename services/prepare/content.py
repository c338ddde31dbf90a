"""The content store (R3.4) and the token count of content, keyed by its hash."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from domain.context.tokens import CachedCounter
from schemas.answers.content import Blob
from storage.blobs import Blobs


@dataclass
class ContentStore:
    blobs: Blobs
    counter: CachedCounter

    def count(self, text: str) -> int:
        """Tokens of ``text``; a repeated text is counted once (keyed by its sha256)."""
        return self.counter.count_keyed(hashlib.sha256(text.encode()).hexdigest(), text)

    async def put(
        self,
        space_id: str,
        data: bytes,
        media_type: str,
        counted: tuple[int, str] | None = None,
    ) -> Blob:
        """Store ``data`` in ``space_id``'s content store (only its records reference it).
        ``counted``: a token count the caller already has, with its method — the
        gateway's final input is its own estimate, not worth a second tokenizer pass."""
        sha = hashlib.sha256(data).hexdigest()
        if counted is not None:
            tokens, method = counted
        else:
            try:
                text = data.decode("utf-8")
                tokens, method = self.count(text), self.counter.method
            except UnicodeDecodeError:
                tokens, method = len(data), "estimate:utf8_bytes"
        await self.blobs.put(space_id, sha, data, media_type, tokens, method)
        return Blob(sha256=sha, length=len(data), token_count=tokens, token_method=method)
