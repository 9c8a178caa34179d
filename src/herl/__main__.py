"""``python -m herl``: the ``herl`` command."""

import sys

from herl.cli import main

sys.exit(main())
