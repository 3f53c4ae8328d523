"""``odradek`` for any tree: the command line of whichever ``src/`` is first on the path.

The venv's console script points to the checkout's entry point (``odradek.cli._entry``),
which an older tree run as ``odradek@REF`` may not have. This runs ``odradek.cli.main``,
which every tree has, keeping hypothesis out of the process as the entry point does (kio
imports it whenever it can: a broker of an old tree would otherwise start slower and
larger than the checkout's, and its peak RSS would not compare).
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from odradek.cli.main import main  # noqa: E402

sys.exit(main())
