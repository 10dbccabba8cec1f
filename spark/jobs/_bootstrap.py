"""Make ``msgstore_spark`` and ``storage_node`` importable when a job runs from a checkout
that was not pip-installed (plain ``python spark/jobs/x.py`` or ``spark-submit`` of a file)."""

from __future__ import annotations

import sys
from pathlib import Path


def ensure_importable() -> None:
    try:
        import msgstore_spark  # noqa: F401

        import storage_node  # noqa: F401
    except ImportError:
        here = Path(__file__).resolve().parent
        for path in (here.parent, here.parent.parent):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
