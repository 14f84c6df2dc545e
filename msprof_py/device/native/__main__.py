"""``python -m msprof_py.device.native build|status``."""

import sys

from msprof_py.device.native import main

sys.exit(main())
