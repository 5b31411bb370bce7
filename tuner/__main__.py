"""``python -m tuner`` is ``moetune``."""

from __future__ import annotations

import sys

from tuner.app.cli import main

sys.exit(main())
