"""Spark's Python processes import pyspark from site-packages, compiled, not from
``pyspark.zip`` (src/odradek/spark/home.py): the tests' Spark applications run with
``SPARK_HOME`` set to a home of symlinks without the zips (tests/spark/conftest.py, as
``odradek mirror`` does for its own session).

Each of the Python processes Spark starts reports the file it imported pyspark and py4j
from: a UDF's worker (forked from the session's worker daemon), a data source's planner
(forked from ``pyspark.daemon``, started by the JVM apart from the tasks' daemon), and the
streaming source's runner (``python_streaming_source_runner``, started directly). Without
the home (``SPARK_HOME`` unset, or the package's own), every one of them names
``pyspark.zip``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.spark.home import compiled_spark_home, pip_spark_home, use_compiled_spark_home

pytestmark = pytest.mark.timeout(240)


def _check(role: str, origins: tuple[str, ...]) -> None:
    for origin in origins:
        assert ".zip" not in origin, f"the {role} imported {origin}"
        assert "site-packages" in origin, f"the {role} imported {origin}"


def test_the_sessions_jvm_runs_from_the_home_without_the_zips(spark: Any) -> None:
    home = spark.sparkContext._jvm.java.lang.System.getenv("SPARK_HOME")
    assert home == os.environ["SPARK_HOME"]
    assert not (Path(home) / "python" / "lib" / "pyspark.zip").exists()
    assert (Path(home) / "jars").resolve() == (pip_spark_home() or Path()) / "jars"


def test_a_udfs_worker_imports_pyspark_from_site_packages(spark: Any) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import StringType, StructField, StructType

    def origins(_: int) -> tuple[str, str]:  # nested: pickled by value
        import py4j  # type: ignore[import-untyped]
        import pyspark

        return str(pyspark.__file__), str(py4j.__file__)

    schema = StructType([StructField("pyspark", StringType()), StructField("py4j", StringType())])
    rows = spark.range(2, numPartitions=2).select(udf(origins, schema)("id").alias("o")).collect()
    assert len(rows) == 2
    for row in rows:
        _check("UDF's worker", tuple(row.o))


def test_a_data_sources_planner_and_streaming_runner_import_pyspark_from_site_packages(
        spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )

    name = f"origins_{uuid.uuid4().hex[:8]}"

    def origins() -> tuple[str, str]:
        import py4j  # type: ignore[import-untyped]
        import pyspark

        return str(pyspark.__file__), str(py4j.__file__)

    class Reader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:  # in the planner
            return [InputPartition(origins())]

        def read(self, partition: InputPartition) -> Any:
            yield ("planner", *partition.value)

    class StreamReader(DataSourceStreamReader):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, int]:  # in the streaming source's runner
            return {"n": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"n": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(origins())] if start != end else []

        def read(self, partition: InputPartition) -> Any:
            yield ("runner", *partition.value)

    class Origins(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return "role string, pyspark string, py4j string"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return StreamReader()

    spark.dataSource.register(Origins)
    (planner,) = spark.read.format(name).load().collect()
    assert planner.role == "planner"
    _check("data source's planner", (planner.pyspark, planner.py4j))

    table = f"origins_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format(name).load().writeStream.format("memory")
             .queryName(table).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql(f"select * from {table}").collect()
    assert [r.role for r in rows] == ["runner"]
    _check("streaming source's runner", (rows[0].pyspark, rows[0].py4j))


def test_the_home_links_everything_of_the_package_but_its_zips(tmp_path: Path) -> None:
    package = pip_spark_home()
    assert package is not None, "pyspark is not a pip install here"
    home = compiled_spark_home(package, tmp_path)
    assert compiled_spark_home(package, tmp_path) == home  # made once, then found
    names = {e.name for e in package.iterdir()} - {"python"}
    assert {e.name for e in home.iterdir()} == names | {"python"}
    for n in names:
        assert (home / n).resolve() == (package / n).resolve()
    assert list((home / "python").rglob("*")) == [home / "python" / "lib"]
    assert os.access(home / "bin" / "spark-submit", os.X_OK)
    assert [p.name for p in tmp_path.iterdir()] == [home.name]  # nothing left aside


def test_the_home_is_used_only_when_spark_home_and_the_workers_python_allow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")  # a Spark install of the user's
    assert use_compiled_spark_home(tmp_path) is None
    assert os.environ["SPARK_HOME"] == "/opt/spark"

    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # may have no pyspark
    assert use_compiled_spark_home(tmp_path) is None
    assert "SPARK_HOME" not in os.environ

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    home = use_compiled_spark_home(tmp_path)
    assert home is not None and os.environ["SPARK_HOME"] == str(home)
    assert home.parent == tmp_path


@pytest.mark.timeout(400)
def test_odradek_mirror_starts_its_spark_from_the_home(tmp_path: Path) -> None:
    """``odradek mirror`` without ``SPARK_HOME`` starts its JVM from a home it makes (here
    under ``XDG_CACHE_HOME``), and mirrors through it: the streaming runner, the planners
    and the task workers all run without the zips."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from odradek.testing import running_broker
    from tests.interop._broker import odradek_executable
    from tests.spark.test_mirror import ends, wait_until

    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    with (
        running_broker(data_dir=tmp_path / "a") as a,
        running_broker(data_dir=tmp_path / "b") as b,
    ):
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic("h.t", 1, 1)])["h.t"].result(30)
        producer = ck.Producer({"bootstrap.servers": a.bootstrap})
        producer.produce("h.t", b"v")
        assert producer.flush(30) == 0
        del producer  # (it would retry the broker's address once the broker is gone)
        cmd = [str(odradek_executable()), "mirror", "--source-bootstrap-server", a.bootstrap,
               "--target-bootstrap-server", b.bootstrap, "--include", r"h\..*",
               "--topic-prefix", "a.", "--checkpoint-dir", str(tmp_path / "ckpt"),
               "--master", "local[2]", "--sync-interval", "1"]
        with open(tmp_path / "mirror.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        try:
            wait_until(lambda: ends(b.bootstrap, "a.h.t", 1) == [1], "the record mirrored")
            jvms = [pid for pid in _session_pids(proc.pid)
                    if b"org.apache.spark.deploy.SparkSubmit" in _read(pid, "cmdline")]
            assert len(jvms) == 1, (tmp_path / "mirror.log").read_text()[-3000:]
            environ = dict(e.split(b"=", 1) for e in _read(jvms[0], "environ").split(b"\0")
                           if b"=" in e)
            home = Path(environ[b"SPARK_HOME"].decode())
            assert home.parent == tmp_path / "cache" / "odradek"
            assert not (home / "python" / "lib" / "pyspark.zip").exists()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)


def _session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (the mirror's: its JVM and the JVM's Python)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _read(int(entry.name), "stat")
            if stat and int(stat.rsplit(b")", 1)[1].split()[3]) == sid:
                pids.append(int(entry.name))
    return pids


def _read(pid: int, name: str) -> bytes:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes()
    except OSError:
        return b""
