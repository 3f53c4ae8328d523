"""Spark's Python workers come from odradek.spark.daemon (the shared session sets
``spark.python.daemon.module``), with the connector imported before they run anything.

Neither the UDF nor the data source below imports Odradek: the connector is in a worker's
``sys.modules`` only when the daemon it was forked from loaded it. With pyspark's own
daemon (the setting removed from tests/spark/conftest.py) both tests fail. Spark's data
source planners are started through pyspark's daemon whatever the setting (see the
second test).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(240)

#: What a worker says of itself: its parent's command line, whether the connector was
#: imported when its code ran, and its CPU so far (seconds).
Report = tuple[str, bool, float]


def _check(report: Report) -> None:
    parent, preloaded, _cpu = report
    assert "odradek.spark.daemon" in parent.split(), parent
    assert preloaded, f"the connector was not imported in a worker of {parent!r}"


def test_a_udf_runs_in_a_worker_forked_from_the_connector_daemon(spark: Any) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BooleanType, DoubleType, StringType, StructField, StructType

    def whoami(_: int) -> Report:  # nested: pickled by value, imports nothing of Odradek
        import os
        import sys
        import time

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        return parent, "odradek.spark.source" in sys.modules, time.process_time()

    schema = StructType([StructField("parent", StringType()),
                         StructField("preloaded", BooleanType()),
                         StructField("cpu", DoubleType())])
    rows = spark.range(4, numPartitions=2).select(udf(whoami, schema)("id").alias("w")).collect()
    reports = [tuple(r.w) for r in rows]
    assert len(reports) == 4
    for report in reports:
        _check(report)


def test_a_python_data_source_reads_in_workers_of_the_connector_daemon(spark: Any) -> None:
    """The task that reads is forked from the connector's daemon; the planner
    (``pyspark.sql.worker.plan_data_source_read``, for the driver) is not: Spark 4.3 starts
    its data source planners (lookup, create, plan read, write, commit) through
    ``pyspark.daemon`` whatever ``spark.python.daemon.module`` says (``SparkEnv``'s
    ``createPythonWorker`` without a daemon module, which ``PythonPlannerRunner`` calls).
    Should a later Spark honour the setting there too, this test says so, and
    docs/spark.md's figures are to be measured again."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    name = f"whoami_{uuid.uuid4().hex[:8]}"

    def whoami() -> Report:
        import os
        import sys
        import time

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        return parent, "odradek.spark.source" in sys.modules, time.process_time()

    class Reader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:  # runs in the planner
            return [InputPartition(whoami())]

        def read(self, partition: InputPartition) -> Any:  # runs in a task's worker
            yield ("planner", *partition.value)
            yield ("task", *whoami())

    class WhoAmI(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return "role string, parent string, preloaded boolean, cpu double"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(WhoAmI)
    rows = spark.read.format(name).load().collect()
    by_role = {r.role: (r.parent, r.preloaded, r.cpu) for r in rows}
    assert sorted(by_role) == ["planner", "task"]
    _check(by_role["task"])
    assert "pyspark.daemon" in by_role["planner"][0].split(), by_role["planner"]


def test_a_module_that_fails_to_import_is_left_out_of_the_preload() -> None:
    """The daemon starts without it, as pyspark's would, and says which."""
    import gc

    from odradek.spark.daemon import preload

    try:
        failed = preload(["daemon", "pyspark.worker"],
                         modules=("odradek_no_such_module", "json"))
    finally:
        gc.unfreeze()
    assert failed == ["odradek_no_such_module"]


def test_the_daemon_serves_without_the_connectors_dependencies(tmp_path: Any) -> None:
    """A workers' Python without confluent-kafka or pyarrow: the daemon still starts and
    gives the JVM its port, as pyspark's would, so a session's plain UDFs run (the package
    ``odradek.spark``, which ``python -m`` imports first, loads the connector only on
    use). Before, its import failed and every Python task of the session with it."""
    import os
    import subprocess
    import sys

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("confluent_kafka", "pyarrow"):
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, (str(blocked), os.environ.get("PYTHONPATH"))))}
    daemon = subprocess.Popen([sys.executable, "-m", "odradek.spark.daemon", "pyspark.worker"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    try:
        assert daemon.stdout is not None and daemon.stdin is not None
        port = daemon.stdout.read(4)  # pyspark.daemon's write_int of its port
        assert len(port) == 4 and int.from_bytes(port, "big") > 0, (
            port, daemon.stderr.read().decode() if daemon.poll() is not None else "")
        daemon.stdin.close()  # the JVM going away: the daemon ends
        daemon.wait(60)
        stderr = daemon.stderr.read().decode() if daemon.stderr else ""
        assert "confluent_kafka" in stderr or "pyarrow" in stderr, stderr  # said, not fatal
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)


def test_no_zip_archive_is_read_again_in_a_forked_worker(tmp_path: Any) -> None:
    """Spark puts its ``spark-core`` jar (a zip of some 6,000 entries, no Python in it) on
    every worker's ``sys.path``, and a worker's ``main`` calls
    ``importlib.invalidate_caches``, which makes every ``zipimporter`` cached in
    ``sys.path_importer_cache`` read its archive's directory again: 0.13 s of CPU per
    forked worker for the jar alone. After the preload no importer of a zip archive is
    cached, the archive's own included; an import from the archive in the child still
    works (its importer is made again from the directory the daemon read, which
    ``zipimport`` keeps apart)."""
    import subprocess
    import sys
    import zipfile

    archive = tmp_path / "shipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_early.py", "X = 1\n")
        z.writestr("zipped_late.py", "X = 2\n")
    script = f"""
import importlib, os, sys, zipimport
sys.path.insert(0, {str(archive)!r})
import zipped_early
from odradek.spark.daemon import preload
assert preload(["daemon", "pyspark.worker"], modules=("json",)) == []
cached = [k for k, f in sys.path_importer_cache.items()
          if isinstance(f, zipimport.zipimporter)]
assert cached == [], cached
reads = []
real = zipimport._read_directory
zipimport._read_directory = lambda path: reads.append(path) or real(path)
importlib.invalidate_caches()  # as pyspark's worker does before its task
import zipped_late
assert zipped_late.X == 2 and reads == [], reads
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
