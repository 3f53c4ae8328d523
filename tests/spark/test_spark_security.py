"""The odradek data source over SASL_SSL: a broker with TLS and SCRAM (certificates made at
test time), the shared Spark session, writes and reads whose tasks run in Spark's Python
workers with the ``kafka.*`` security options, in the Java client's keys and in
librdkafka's, through the native reader (Odradek's client over TLS and SCRAM) and through
librdkafka. No password reaches a query plan, and a wrong one fails the read with the
broker's reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.spark import fetcher
from odradek.spark.options import parse_read_options
from odradek.testing import RunningBroker
from tests.interop._security import USERS, Certs, bootstrap, confluent_settings, secure_broker

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, Certs]]:
    with secure_broker(tmp_path_factory.mktemp("spark-security")) as running:
        yield running


def java_options(broker: RunningBroker, certs: Certs) -> dict[str, str]:
    """As Spark's own Kafka source takes them."""
    return {
        "kafka.bootstrap.servers": bootstrap(broker, "SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  f'required username="alice" password="{USERS["alice"]}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(certs.ca),
    }


def librdkafka_options(broker: RunningBroker, certs: Certs, password: str | None = None
                       ) -> dict[str, str]:
    settings = confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256", password=password)
    return {"kafka.bootstrap.servers": bootstrap(broker, "SASL_SSL"),
            **{f"kafka.{k}": v for k, v in settings.items()}}


def test_write_and_read_over_sasl_ssl(spark: Any, secured: tuple[RunningBroker, Certs]
                                      ) -> None:
    broker, certs = secured
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(broker, "SASL_SSL"),
                         **confluent_settings(certs, "SASL_SSL", "SCRAM-SHA-256")})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    del admin  # its connections, before the broker stops
    rows = [(f"k{i}", f"v{i}") for i in range(200)]
    out = spark.createDataFrame(rows, "key string, value string").repartition(2).write \
        .format("odradek").mode("append").option("topic", topic)
    for k, v in java_options(broker, certs).items():
        out = out.option(k, v)
    out.save()

    reader = spark.read.format("odradek").option("subscribe", topic)
    for k, v in librdkafka_options(broker, certs).items():
        reader = reader.option(k, v)
    df = reader.load()
    got = sorted((r.key.decode(), r.value.decode()) for r in df.collect())
    assert got == sorted(rows)
    plan = df._jdf.queryExecution().toString()
    assert USERS["alice"] not in plan
    opts = parse_read_options({**librdkafka_options(broker, certs), "subscribe": topic},
                              streaming=False)
    assert fetcher.supports(opts.client)  # the tasks above read natively, over SASL_SSL
    batches = list(fetcher.read_range(opts, topic, 0, 0, 10))
    assert sum(b.num_rows for b in batches) == 10

    # a librdkafka property the native reader lacks: the tasks read through librdkafka
    java = spark.read.format("odradek").option("subscribe", topic) \
        .option("kafka.fetch.min.bytes", "1")
    for k, v in java_options(broker, certs).items():
        java = java.option(k, v)
    loaded = java.load()
    got = sorted((r.key.decode(), r.value.decode()) for r in loaded.collect())
    assert got == sorted(rows)
    assert USERS["alice"] not in loaded._jdf.queryExecution().toString()


def test_a_wrong_password_fails_the_read_with_the_reason(
        spark: Any, secured: tuple[RunningBroker, Certs]) -> None:
    broker, certs = secured
    reader = spark.read.format("odradek").option("subscribe", "anything") \
        .option("kafka.default.api.timeout.ms", "5000")
    for k, v in librdkafka_options(broker, certs, password="not-it").items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=r"(?i)authentication") as caught:
        reader.load().collect()
    assert "not-it" not in str(caught.value)
