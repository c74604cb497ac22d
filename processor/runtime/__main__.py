"""``python -m processor.runtime worker|topics|tail ...`` (the same commands as ``processor``)."""

import sys

from processor.runtime.commands import main

sys.exit(main())
