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
daemon reads it), pyarrow and the connector's modules, forgets the importers of the zip
archives on its path, freezes the garbage collector's view of the modules
(``gc.freeze``: the children's collections neither walk nor touch those objects, so their
pages stay shared with the daemon), and then calls
``pyspark.daemon.manager``, which speaks to the JVM exactly as with the default module:
the port on stdout, worker pids to kill on stdin, a fork per connection. A child finds
the modules in ``sys.modules`` and goes straight to ``main``.

The importers: Spark puts ``pyspark.zip``, py4j's zip and its own ``spark-core`` jar
(``PythonUtils.sparkPythonPath``: some 6,000 entries, no Python in it) first on the
workers' ``PYTHONPATH``. Every archive an import looked in leaves a ``zipimporter`` in
``sys.path_importer_cache``, and so does every package imported from a zip (18 after the
preload with ``pyspark.zip``). A worker's ``main`` calls ``importlib.invalidate_caches``
before each task (``worker_util.setup_spark_files``, for files added to the job), which
makes each of them read its archive's directory again: 0.3 s of CPU per worker for
``pyspark.zip``'s, 0.13 s for the jar's, more than a small task. All of them are dropped
after the preload; an import in the child that looks in an archive again makes its
importer anew from the directory the daemon read (``zipimport`` keeps the directories
apart, by archive), without reading it. A forked worker's CPU before its UDF runs: 0.53 s
with ``pyspark.daemon``, 0.09 s with this module (a UDF in local[2], pyspark 4.3, with
``pyspark.zip``). With the ``SPARK_HOME`` of :mod:`odradek.spark.home` (no
``pyspark.zip`` on the workers' path, pyspark from site-packages) only the jar's importer
is there to drop: a task's worker read its directory again before, 0.13 s of its
0.15-0.2 s before its task. An archive's directory is read again only when the archive
could have changed: Spark's own do not during a session, nor does a zip the job ships
(one added mid-session is put on the worker's ``sys.path`` after the fork, its importer
made there).

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
    archives (see the module's header), then freeze the modules; the names that failed to
    import.

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
        if isinstance(finder, zipimport.zipimporter):
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
