"""Types of the compiled record codec (record_codec.pyx)."""

import numpy as np

MAX_HEADER_BYTES: int

class HeadersTooLong(ValueError): ...

def encode_records(
    offset_deltas: np.ndarray,
    timestamp_deltas: np.ndarray,
    keys: bytes | bytearray | memoryview,
    key_lens: np.ndarray,
    values: bytes | bytearray | memoryview,
    value_lens: np.ndarray,
    msg_ids: bytes | bytearray | memoryview,
    msg_id_lens: np.ndarray,
    tags: bytes | bytearray | memoryview,
    tag_lens: np.ndarray,
    headers: bytes | bytearray | memoryview,
    header_lens: np.ndarray,
    reserve: int = 0,
) -> bytearray: ...
def decode_records(
    data: bytes | bytearray | memoryview, count: int
) -> tuple[
    bytes,
    np.ndarray,
    bytes,
    np.ndarray,
    np.ndarray,
    bytes | None,
    np.ndarray | None,
    list[tuple[int, bytes, bytes]],
]: ...
