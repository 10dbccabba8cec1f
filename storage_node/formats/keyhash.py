"""The key hash: one 32-bit hash per key, computed for a whole batch with array operations.

It picks a key's partition (``hash % partitions``, shared by the store, the client and the
Spark writer) and its key-index slot. Defined on the UTF-8 bytes ``b[0..L)`` of a key as::

    h = sum(b[j] * P ** (L - 1 - j)) mod 2**32      (a polynomial hash, P = 16777619)
    hash = fmix32(h ^ (L * 0x9E3779B1 mod 2**32))     (MurmurHash3's finaliser)

so every bit of the result depends on every byte, and a batch of keys packed back to back is
hashed with a handful of numpy calls instead of a Python call per key.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

P = np.uint32(16777619)
LEN_MIX = np.uint32(0x9E3779B1)
# numpy scalars made once: a Python int operand costs a conversion on every call
_S16, _S13 = np.uint32(16), np.uint32(13)
_M1, _M2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


@lru_cache(maxsize=8)
def _powers(count: int) -> np.ndarray:
    """P**k mod 2**32 for k < count (count rounded up to a power of two by the caller)."""
    out = np.empty(count, dtype=np.uint32)
    out[0] = 1
    with np.errstate(over="ignore"):  # numpy scalars warn on overflow (arrays never do)
        for k in range(1, count):
            out[k] = out[k - 1] * P
    return out


@lru_cache(maxsize=64)
def _weights(length: int) -> tuple[np.ndarray, np.uint32]:
    """The weight of each byte of a key of ``length`` bytes, P**(length - 1 - j), and the
    length's mixing term."""
    weights = _powers(1 << max(4, (length - 1).bit_length()))[length - 1 :: -1].copy()
    return weights, np.uint32(length * int(LEN_MIX) & 0xFFFFFFFF)


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finaliser, in place (integer arrays wrap silently on overflow)."""
    h ^= h >> _S16
    h *= _M1
    h ^= h >> _S13
    h *= _M2
    h ^= h >> _S16
    return h


def key_hashes(
    blob: bytes | bytearray | memoryview,
    lens: np.ndarray,
    length_range: tuple[int, int] | None = None,
) -> np.ndarray:
    """uint32 hash of each key packed in ``blob`` (``lens[i] < 0``: no key, hash 0).

    Keys of one length (the usual batch) are a byte matrix times the weights, one matrix
    product; other batches weigh each byte by its power and sum per key. ``length_range``
    is (shortest, longest) of ``lens`` when the caller knows it already."""
    lens = np.asarray(lens, dtype=np.int64)
    n = len(lens)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    if length_range is None:
        length_range = (int(np.minimum.reduce(lens)), int(np.maximum.reduce(lens)))
    shortest, longest = length_range[0], max(length_range[1], 0)
    if shortest == longest:  # one length: no absent key either
        if not longest:
            return np.zeros(n, dtype=np.uint32)  # fmix32(0) == 0
        weights, mix = _weights(longest)
        h = np.ndarray((n, longest), dtype=np.uint8, buffer=blob) @ weights
        h ^= mix
        return _fmix32(h)
    sizes = np.maximum(lens, 0)
    total = int(np.add.reduce(sizes))
    h = np.zeros(n, dtype=np.uint32)
    if total:
        table = _powers(1 << max(4, (longest - 1).bit_length()))
        data = np.frombuffer(blob, dtype=np.uint8, count=total).astype(np.uint32)
        ends = np.cumsum(sizes)
        data *= table[np.repeat(ends - 1, sizes) - np.arange(total, dtype=np.int64)]
        nonempty = sizes > 0
        h[nonempty] = np.add.reduceat(data, (ends - sizes)[nonempty], dtype=np.uint32)
    h ^= sizes.astype(np.uint32) * LEN_MIX
    out = _fmix32(h)
    if shortest < 0:
        out[lens < 0] = 0
    return out


def key_hash(key: str) -> int:
    """The hash of one key: the same function with plain integers (a lookup hashes one key,
    where numpy's per-call overhead would cost more than the arithmetic)."""
    data = key.encode()
    h = 0
    for b in data:
        h = (h * 16777619 + b) & 0xFFFFFFFF
    h ^= (len(data) * 0x9E3779B1) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)
