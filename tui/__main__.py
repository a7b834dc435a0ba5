"""``python -m tui`` is the ``kvtui`` command."""

import sys

from tui.cli import main

sys.exit(main())
