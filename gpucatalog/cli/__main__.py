"""``python3 -m gpucatalog.cli``: same as the ``catalog`` command."""

import sys

from gpucatalog.cli import main

sys.exit(main())
