"""A ``SPARK_HOME`` for pip-installed pyspark whose Python processes import pyspark compiled.

How it works. Spark's JVM starts Python processes of its own: the worker daemons (for the
tasks, and for a Python data source's planning on the driver: ``pyspark.sql.worker.*``)
and the streaming source's runner (``python_streaming_source_runner``, which must connect
back within a fixed 10 s: ``PythonWorkerFactory.createSimpleWorker``). It puts
``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on their ``PYTHONPATH``
(``PythonUtils.sparkPythonPath``, before the ``PYTHONPATH`` of the environment). Python's
``zipimport`` reads no bytecode cache it has not been given and writes none, so every one
of those processes compiles pyspark's modules from source: ``import pyspark.daemon`` is
about 1.2 s of CPU from the zip and 0.25 s from site-packages, where the bytecode cache is.

With pip-installed pyspark, ``SPARK_HOME`` is the package directory itself (found by
``pyspark/find_spark_home.py`` when unset), and the same pyspark, py4j included, is in
site-packages. :func:`compiled_spark_home` makes a directory of symlinks to the package
directory's entries (``bin``, ``jars``, ``sbin``, ...) except ``python``, whose ``lib`` it
leaves empty; with ``SPARK_HOME`` set to it, ``bin/spark-submit`` and ``spark-class`` run
from it as from the package (they honour a ``SPARK_HOME`` already set), and the two zips
on the workers' ``PYTHONPATH`` name files that do not exist, which Python skips: the
workers import pyspark and py4j from site-packages, compiled once and cached. Nothing
else in a local (or standalone) application reads ``python/lib``; YARN's client does
(it ships ``pyspark.zip`` to the cluster), so do not use it there.

:func:`use_compiled_spark_home` sets ``SPARK_HOME`` to it in this process's environment,
for the JVM a SparkSession started afterwards launches, only when it is safe: no
``SPARK_HOME`` set (a Spark install of the user's is theirs), the workers' Python
(``PYSPARK_PYTHON``) is this interpreter or unset (another Python may have no pyspark
in its site-packages), and pyspark is a pip install (its package holds
``python/lib/pyspark.zip`` and ``jars``). ``odradek mirror`` calls it before starting its
own session; the tests' conftest does for every Spark application of a run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path


def default_base() -> Path:
    """The directory the homes are made in when none is given: ``odradek`` in the user's
    cache directory (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "odradek"


def pip_spark_home() -> Path | None:
    """The directory of the pyspark package when it is a pip install with its zips (the
    ``SPARK_HOME`` ``find_spark_home`` finds for it), else None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    home = Path(spec.origin).resolve().parent
    if (home / "python" / "lib" / "pyspark.zip").is_file() and (home / "jars").is_dir():
        return home
    return None


def compiled_spark_home(pyspark_home: Path, base: Path) -> Path:
    """The ``SPARK_HOME`` of symlinks for ``pyspark_home`` under ``base``, made once per
    pyspark directory (its links follow an upgrade in place), atomically: made aside and
    renamed into place, so processes racing to make it all end with the same complete
    directory."""
    tag = hashlib.sha256(str(pyspark_home).encode()).hexdigest()[:12]
    home = base / f"spark-home-{tag}"
    if _complete(home, pyspark_home):
        return home
    base.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=base))
    try:
        for entry in sorted(pyspark_home.iterdir()):
            if entry.name != "python":
                (aside / entry.name).symlink_to(entry)
        (aside / "python" / "lib").mkdir(parents=True)
        try:
            aside.rename(home)
        except OSError:  # made meanwhile by another process (or stale: replaced)
            if not _complete(home, pyspark_home):
                shutil.rmtree(home, ignore_errors=True)
                aside.rename(home)
    finally:
        if aside.exists():
            shutil.rmtree(aside, ignore_errors=True)
    return home


def _complete(home: Path, pyspark_home: Path) -> bool:
    """Whether ``home`` is a finished home for ``pyspark_home`` (its last link made)."""
    names = [e.name for e in pyspark_home.iterdir() if e.name != "python"]
    return (home / "python" / "lib").is_dir() and all(
        (home / n).is_symlink() and (home / n).resolve() == (pyspark_home / n).resolve()
        for n in names)


def _this_python(python: str) -> bool:
    """Whether ``python`` (a path, or a name on the PATH) is this interpreter's: in the
    same directory once links are resolved. (Not the file itself resolved: every
    virtualenv's python links to the same one.)"""
    found = shutil.which(python)
    return found is not None and (
        Path(found).absolute().parent.resolve() == Path(sys.executable).absolute().parent.resolve())


def use_compiled_spark_home(base: Path | None = None) -> Path | None:
    """Set ``SPARK_HOME`` to :func:`compiled_spark_home` when it is safe (see the
    module's header); the home set, or None when left alone."""
    if os.environ.get("SPARK_HOME"):
        return None
    python = os.environ.get("PYSPARK_PYTHON")
    if python and not _this_python(python):
        return None
    pyspark_home = pip_spark_home()
    if pyspark_home is None:
        return None
    if importlib.util.find_spec("py4j") is None:  # its zip is left out of the home too
        return None
    try:
        home = compiled_spark_home(pyspark_home, default_base() if base is None else base)
    except (OSError, RuntimeError):  # (RuntimeError: no home directory to find)
        return None
    os.environ["SPARK_HOME"] = str(home)
    return home
