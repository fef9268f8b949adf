"""``python3 -m gpucatalog.catalog.cli``: same as the ``catalog`` command."""

import sys

from gpucatalog.catalog.cli import main

sys.exit(main())
