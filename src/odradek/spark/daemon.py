"""Spark's Python worker daemon with the connector's imports done before it forks.

How it works. Spark's JVM does not start a Python process per task: its
``PythonWorkerFactory`` starts one *daemon* per Python executable, worker module and
environment (``python -m <spark.python.daemon.module> <worker module>``, the module
``pyspark.daemon`` by default), reads the port the daemon prints on stdout, and asks it
for each worker by connecting to that port; the daemon forks a child per connection
(``pyspark.daemon.manager``), and the child imports the worker module (``pyspark.worker``
for tasks, ``pyspark.sql.worker.plan_data_source_read`` and its siblings for a Python data
source's planning on the driver: lookup, create, plan read, write, commit) and runs its
``main``. pyspark's daemon imports next to nothing itself, so every child it forks pays
for pyspark's SQL modules, pyarrow and the connector (``odradek.spark``, confluent-kafka)
again: about 1.2 s of CPU each, where the work of a planner or of a small task is a few
milliseconds.

This module is the same daemon with those imports done once, in the daemon, before the
first fork: it imports the daemon's worker module (its first argument, as pyspark's
daemon reads it), pyarrow and the connector's modules, forgets the importers of the
packages inside zip archives, freezes the garbage collector's view of the modules
(``gc.freeze``: the children's collections neither walk nor touch those objects, so their
pages stay shared with the daemon), and then calls
``pyspark.daemon.manager``, which speaks to the JVM exactly as with the default module:
the port on stdout, worker pids to kill on stdin, a fork per connection. A child finds
the modules in ``sys.modules`` and goes straight to ``main``.

The importers: Spark puts ``pyspark.zip`` first on the workers' ``PYTHONPATH``, so
pyspark's modules come from the zip archive (compiled from source on every import: a zip
holds no bytecode cache), and every package imported from it leaves a ``zipimporter`` of
its own in ``sys.path_importer_cache`` (18 after the preload). A worker's ``main`` calls
``importlib.invalidate_caches`` before each task (``worker_util.setup_spark_files``,
for files added to the job), which makes each of them read the archive's directory again:
0.3 s of CPU per worker, more than the task. The entries of the archives' packages
(``zipimporter.prefix`` set) are dropped after the preload; the archives' own entries on
``sys.path`` stay, and an import of a package not yet loaded makes its importer again
from the directory already read. A forked worker's CPU before its UDF runs: 0.53 s with
``pyspark.daemon``, 0.09 s with this module (a UDF in local[2], pyspark 4.3). With
the ``SPARK_HOME`` of :mod:`odradek.spark.home` (no zips on the workers' path, pyspark
from site-packages) there are no such importers to drop.

pyspark's daemon defers the worker's imports to the child on purpose: a library that
starts threads on import and then forks may leave a child with a lock held by a thread
that does not exist there. Importing pyarrow here starts two native threads, both idle
in a condition wait: jemalloc's background purging thread (Arrow's allocator) and
OpenBLAS's pool (numpy's); both libraries register ``pthread_atfork`` handlers that take
their locks around the fork and reset their thread state in the child. No Python thread
is started here (the connector starts its clients' threads only when it runs).

What a task sees differently: the modules imported here are the installed ones, and a
task finds them in ``sys.modules``; a copy of one of them shipped with the job
(``--py-files``, ``spark.submit.pyFiles``, ``addPyFile``: a patched ``odradek`` or one of
its pure-Python dependencies), which pyspark's daemon would import from the task's
``sys.path`` where it comes first, is not used (docs/spark.md).

Use it by setting ``spark.python.daemon.module`` to ``odradek.spark.daemon`` in the
session's configuration (docs/spark.md); it only has an effect with
``spark.python.use.daemon`` (the default, except on Windows). The Python executable the
workers run (``PYSPARK_PYTHON``) must have Odradek installed, as for the connector itself.
"""

from __future__ import annotations

import gc
import importlib
import sys
import zipimport

#: What every child would otherwise import: the connector (reading, writing, the
#: mirror's sink) and what it imports (pyarrow, confluent-kafka, pyspark's data source
#: API), besides the daemon's own worker module.
PRELOADED = (
    "pyarrow",
    "pyspark.worker",
    "odradek.spark.source",
    "odradek.spark.fetcher",
    "odradek.spark.sink",
    "odradek.spark.mirror",
)


def worker_module(argv: list[str]) -> str:
    """The module the daemon's children run, named as pyspark's daemon names it: the
    first argument when it is one of pyspark's, else ``pyspark.worker``."""
    if len(argv) > 1 and argv[1].startswith("pyspark"):
        return argv[1]
    return "pyspark.worker"


def preload(argv: list[str], modules: tuple[str, ...] = PRELOADED) -> list[str]:
    """Import the daemon's worker module and ``modules``, forget the importers of the zip
    archives' packages, then freeze the modules; the names that failed to import.

    A module that fails to import is left out, as pyspark's daemon would have left it:
    the daemon still serves the session's other Python work (a UDF needs no Kafka
    client), and a worker that needs the module meets the same error itself, where Spark
    reports it with the task."""
    failed = []
    for name in (worker_module(argv), *modules):
        try:
            importlib.import_module(name)
        except Exception:  # any import error: see the docstring
            failed.append(name)
    for entry, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter) and finder.prefix:
            del sys.path_importer_cache[entry]
    gc.collect()
    gc.freeze()
    return failed


def main() -> None:
    for name in preload(sys.argv):
        # stderr only: the daemon's stdout carries its port to the JVM
        print(f"odradek.spark.daemon: {name} not preloaded (it failed to import)",
              file=sys.stderr)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
