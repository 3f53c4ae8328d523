"""Start the nafka peer broker on Python 3.11 (bench venv interpreter).

Usage: ``bench/_tools/build/venv/bin/python bench/_tools/nafka_run.py SQLITE_FILE PORT``

nafka 0.1 targets Python >= 3.12: it opens its store with
``sqlite3.connect(..., autocommit=True)``. On 3.11 the same behaviour (no implicit
transactions; nafka issues its own BEGIN/COMMIT) is ``isolation_level=None``, so the
keyword is translated here. Its own ``main()`` logs at DEBUG for every request; this runs
it at WARNING, which is what a benchmark should measure.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys

_connect = sqlite3.connect


def _connect_311(*args, autocommit=None, **kwargs):  # type: ignore[no-untyped-def]
    if autocommit:
        kwargs["isolation_level"] = None
    return _connect(*args, **kwargs)


sqlite3.connect = _connect_311  # type: ignore[assignment]

from nafka.server import run_server  # noqa: E402

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run_server(sys.argv[1], int(sys.argv[2])))
