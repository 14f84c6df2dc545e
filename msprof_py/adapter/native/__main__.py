"""``python -m msprof_py.adapter.native build|status``."""

import sys

from msprof_py.adapter.native import main

sys.exit(main())
