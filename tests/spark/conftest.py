"""One local SparkSession (local[2]) and one broker for the whole Spark test run (the
fixtures ``spark`` and ``mirror_spark`` are the same session in one process; each is a
group of its own for the scheduler, see :func:`mirror_spark`).

The session's JVM is started with its stderr (and so that of Spark's Python workers, which
the JVM copies to its own) in a file, :func:`spark_stderr`, so a test can check what the
workers print there (librdkafka's raw ``%3|...`` lines must not be).

Every Spark JVM of the run (this session's, and those of the ``odradek mirror`` and plain
``python`` processes the tests start, which inherit the environment) gets the client JIT
and the serial collector through ``SPARK_SUBMIT_OPTS``, as ZooKeeper's and the Java
client's JVMs in the tests do: the tests' Spark applications are short and small, and on a
2-core machine that runs several of them beside the brokers, the server JIT's compiler
threads and the parallel collector's cost more CPU than their work.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow  # noqa: F401  (a missing Spark dependency fails the run, never skips it)
import pyspark  # noqa: F401
import pytest

#: The JVM options of every Spark application the tests start (see the module's header).
SPARK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
    filter(None, (os.environ.get("SPARK_SUBMIT_OPTS"), SPARK_JVM_OPTIONS)))


@pytest.fixture(scope="session")
def spark_stderr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file the Spark session's JVM and its Python workers write their stderr to."""
    return tmp_path_factory.mktemp("spark") / "jvm.stderr"


@pytest.fixture(scope="session")
def spark(spark_stderr: Path) -> Iterator[Any]:
    session = _started(spark_stderr)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def mirror_spark(spark_stderr: Path) -> Iterator[Any]:
    """The Spark session the mirror tests run the mirror's query in
    (:func:`tests.spark.test_mirror.mirror_in_session`): the same session as ``spark``
    where one worker runs both, but a group of its own for the scheduler
    (tests/conftest.py), so the long mirror tests and the other Spark tests can run on
    two workers side by side, one Spark application each, rather than one after the
    other on one worker."""
    session = _started(spark_stderr)
    yield session
    session.stop()


def _started(spark_stderr: Path) -> Any:
    """The process's SparkSession: started here, its JVM's stderr in ``spark_stderr``,
    or the one already running (``getOrCreate``)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    saved = os.dup(2)  # the JVM inherits fd 2 when the builder launches it
    try:
        with spark_stderr.open("ab") as out:
            os.dup2(out.fileno(), 2)
        return _session(SparkSession)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _session(spark_session: Any) -> Any:
    session = (
        spark_session.builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.python.daemon.module", "odradek.spark.daemon")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
