"""``python -m storage_node.cli``: the same as the ``msgstore`` command."""

import sys

from storage_node.cli.main import main

sys.exit(main())
