"""``python -m forum``: the ``forum`` command, for where the console script is not on PATH."""

import sys

from forum.cli import main

sys.exit(main())
