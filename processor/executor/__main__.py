"""``python -m processor.executor run ...`` (the same command as ``processor executor run``)."""

import sys

from processor.cli.executor import main

sys.exit(main())
