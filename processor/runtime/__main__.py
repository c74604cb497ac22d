"""``python -m processor.runtime worker|topics|tail ...`` (the same commands as ``processor``)."""

import sys

from processor.cli.worker import main

sys.exit(main())
