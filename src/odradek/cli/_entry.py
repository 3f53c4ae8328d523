"""The ``odradek`` command's entry point (the console script and ``python -m odradek``).

It keeps a test library out of every command's process before the command line loads:
kio, the protocol's schemas, registers hypothesis strategies for its types whenever
hypothesis can be imported, and hypothesis brings trio's testing helpers with it. Where the
test extras are installed (a development venv, CI), that import cost each ``odradek``
process (a broker, every tool) about 0.3 s of CPU at start and served nothing it does.
Marking the module absent makes kio's optional import fail as it does in a production
install. A process that imported hypothesis already (a test calling
:func:`odradek.cli.main.main` in-process) keeps it.
"""

from __future__ import annotations

import sys

#: imported by a dependency when present, used by no command
UNUSED_OPTIONAL_IMPORTS = ("hypothesis",)


def main() -> int:
    for name in UNUSED_OPTIONAL_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    from odradek.cli.main import main as run

    return run()
