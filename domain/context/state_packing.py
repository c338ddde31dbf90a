"""A dumped render state packed for storage (``domain.context.render_state``), pure: the
layout's magic, where its eager part ends, and the compressed form of two zstd frames —
what every load reads, and the records with their texts, decompressed only when first
read — under one CRC."""

from __future__ import annotations

import zlib

import zstandard

MAGIC = b"ALC-render-state/4\n"
PACKED = b"ALC-render-state/4+zstd\n"


class Unreadable(ValueError):
    """A stored state of this format that cannot be read back (damaged or forged): the
    caller renders in full instead."""


def eager_end(data: bytes) -> int:
    """Where the records section starts: head and messages before it are read by every
    load; records and their texts after it only when first used."""
    n = len(MAGIC)
    return n + 32 + sum(int.from_bytes(data[n + 8 * k : n + 8 * k + 8], "big") for k in range(2))


def pack(data: bytes) -> bytes:
    """``dump``'s bytes compressed for storage (zstd level 1: a fifth of the size, so a
    cold prepare reads a fifth from PostgreSQL; reading 100 MB took 0.8 s), in two
    frames: what every load reads, and the records with their texts, decompressed only
    when first read. A CRC of both catches a damaged row before anything is built from
    it. zstd releases the GIL: callers run this in a worker thread."""
    z = zstandard.ZstdCompressor(level=1)
    cut = eager_end(data)
    eager, rest = z.compress(data[:cut]), z.compress(data[cut:])
    sizes = len(eager).to_bytes(8, "big") + zlib.crc32(eager + rest).to_bytes(4, "big")
    return b"".join((PACKED, sizes, eager, rest))


def frames(data: bytes) -> tuple[bytes, bytes]:
    """``pack``'s two frames, checked."""
    n = len(PACKED)
    cut = n + 12 + int.from_bytes(data[n : n + 8], "big")
    eager, rest = data[n + 12 : cut], data[cut:]
    if zlib.crc32(eager + rest) != int.from_bytes(data[n + 8 : n + 12], "big"):
        raise Unreadable("damaged render state: checksum mismatch")
    return eager, rest


def decompress(frame: bytes) -> bytes:
    try:
        return zstandard.ZstdDecompressor().decompress(frame)
    except zstandard.ZstdError as exc:
        raise Unreadable(f"damaged render state: {exc}") from exc


def unpack(data: bytes) -> bytes:
    """``pack``'s input back; anything else is returned as it is (``load`` judges it).
    A damaged row raises ``Unreadable``. (``load`` takes packed bytes as they are.)"""
    if not data.startswith(PACKED):
        return data
    eager, rest = frames(data)
    return decompress(eager) + decompress(rest)
