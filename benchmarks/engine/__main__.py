"""``python -m benchmarks.engine``: the engine benchmark alone (same options as ``python -m benchmarks engine``)."""

import sys

from benchmarks.engine import main

sys.exit(main())
