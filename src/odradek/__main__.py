"""``python -m odradek``: the ``odradek`` command (:mod:`odradek.cli._entry`)."""

import sys

from odradek.cli._entry import main

sys.exit(main())
