"""``python -m processor.cli ...`` (the same as the ``processor`` command)."""

import sys

from processor.cli.parser import main

sys.exit(main())
