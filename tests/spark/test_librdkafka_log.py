"""The connector's librdkafka clients in Spark's Python workers, with a broker that goes away:
librdkafka's complaints go to the ``odradek.spark.librdkafka`` logger (collected here by
Spark's own worker logging, ``spark.tvf.python_worker_logs()``), never raw ``%3|...`` lines
to the workers' stderr (issue 19). The shared session's JVM, and the workers through it,
write stderr to :func:`spark_stderr`."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.interop._broker import start_broker

pytestmark = pytest.mark.timeout(240)

RAW_LINE = re.compile(r"^%\d\|", re.MULTILINE)
TIMEOUT = {"kafka.default.api.timeout.ms": "4000"}


def _librdkafka_logs(spark: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return (spark.tvf.python_worker_logs()
            .filter(F.col("logger") == "odradek.spark.librdkafka")
            .select("level", "msg").collect())


def test_a_broker_going_away_is_logged_by_the_workers_not_printed_raw(
        spark: Any, spark_stderr: Path, tmp_path: Path) -> None:
    topic = f"gone-{uuid.uuid4().hex[:8]}"
    before = spark_stderr.stat().st_size if spark_stderr.exists() else 0
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        with start_broker(tmp_path) as broker:
            rows = spark.createDataFrame([(f"v{i}",) for i in range(10)], "value string")
            # the workers use the broker: a write and a read that succeed ...
            rows.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap) \
                .option("topic", topic).mode("append").save()
            read = spark.read.format("odradek").option("kafka.bootstrap.servers",
                                                       broker.bootstrap) \
                .option("subscribe", topic).options(**TIMEOUT)
            assert read.load().count() == 10
            broker.stop()  # ... then it goes away
            with pytest.raises(Exception, match=r"not acknowledged|not written"):
                rows.write.format("odradek").option("kafka.bootstrap.servers",
                                                    broker.bootstrap) \
                    .option("topic", topic).options(**TIMEOUT).mode("append").save()
            with pytest.raises(Exception, match="cannot reach the brokers"):
                read.load().count()
        logs = _librdkafka_logs(spark)
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    refused = [r for r in logs if "Connection refused" in r.msg and r.msg.startswith("FAIL ")]
    assert any("rdkafka#producer" in r.msg for r in refused), logs
    assert any("rdkafka#consumer" in r.msg for r in refused), logs
    assert {r.level for r in refused} == {"ERROR"}
    with spark_stderr.open("rb") as f:
        f.seek(before)
        stderr = f.read().decode(errors="replace")
    assert not RAW_LINE.search(stderr), stderr[-3000:]
