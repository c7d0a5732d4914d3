"""``python -m gruc``: the ``gruc`` command, where the console script is not on ``PATH``."""

import sys

from gruc.cli import main

sys.exit(main())
