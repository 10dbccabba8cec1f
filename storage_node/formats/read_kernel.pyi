"""Types of the compiled read kernel (read_kernel.pyx)."""

import numpy as np

def frame_rows(
    data: bytes | memoryview, lo: int, positions: np.ndarray, i: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
def gather_rows(
    data: bytes | memoryview,
    rel: np.ndarray,
    fst: np.ndarray,
    fid: np.ndarray,
    frame_size: np.ndarray,
    frame_count: np.ndarray,
    frame_ms: np.ndarray,
    topic_ok: np.ndarray,
    offsets: np.ndarray,
    partition: int,
    tag: bytes | None,
) -> tuple[
    int,
    int,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    bytes,
    np.ndarray,
    bytes,
    np.ndarray,
    bytes,
    np.ndarray,
    bytes,
    np.ndarray,
    bytes | None,
]: ...
