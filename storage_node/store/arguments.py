"""Argument checks shared by the store's entry points (a bad argument changes nothing)."""

from __future__ import annotations

import numpy as np

from storage_node.errors import InvalidArgument


def check_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int if it is an integer (not a bool) in ``[low, high]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not low <= value <= high
    ):
        raise InvalidArgument(f"{name} must be an integer in [{low}, {high}], not {value!r}")
    return int(value)
