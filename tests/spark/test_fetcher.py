"""The worker-side native reader against a real broker, without Spark: it returns what the
librdkafka reader returns, follows data-loss rules, survives a broker restart and fails
with a clear error (no hang) when no broker answers."""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from odradek.spark import client as kc
from odradek.spark import fetcher
from odradek.spark.options import ReadOptions, parse_read_options
from odradek.testing import RunningBroker, running_broker
from tests.interop._broker import refusing_address

pytestmark = pytest.mark.timeout(120)


def _options(bootstrap: str, topic: str, **extra: str) -> ReadOptions:
    return parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra}, streaming=False
    )


def _topic(bootstrap: str, partitions: int = 1, **config: str) -> str:
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, n: int, **producer: Any) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **producer})
    for i in range(n):
        p.produce(
            topic, b"v%d" % i if i % 7 else None, None if i % 3 else b"k%d" % i, 0,
            headers=[("n", str(i).encode()), ("e", None)] if i % 4 == 0 else None,
        )
        if i % 500 == 0:
            p.flush()
    assert p.flush(30) == 0


def _table(batches: Any, headers: bool = True) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=kc.arrow_schema(headers))


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_native_reader_matches_librdkafka(
    shared_broker: RunningBroker, codec: str, timestamp_type: str
) -> None:
    boot = shared_broker.bootstrap
    topic = _topic(boot, **{"message.timestamp.type": timestamp_type})
    _produce(boot, topic, 3000, **{"compression.type": codec})
    opts = _options(boot, topic, includeHeaders="true")
    for start, until in ((0, 3000), (17, 2999), (1000, 1001), (5, 5)):
        native = _table(fetcher.read_range(opts, topic, 0, start, until, flush_rows=700))
        librdkafka = _table(kc.read_range(opts, topic, 0, start, until))
        assert native.num_rows == until - start
        assert native.equals(librdkafka), (start, until)
    # the schema without headers too
    plain = _options(boot, topic)
    assert _table(fetcher.read_range(plain, topic, 0, 0, 3000), False).equals(
        _table(kc.read_range(plain, topic, 0, 0, 3000), False)
    )


def test_data_loss_rules(shared_broker: RunningBroker) -> None:
    boot = shared_broker.bootstrap
    topic = _topic(boot)
    _produce(boot, topic, 30)
    admin = AdminClient({"bootstrap.servers": boot})
    tp = ck.TopicPartition(topic, 0, 10)
    admin.delete_records([tp])[tp].result(30)
    with pytest.raises(kc.OdradekSparkError, match=r"offsets 0\.\.9 .*failOnDataLoss=false"):
        list(fetcher.read_range(_options(boot, topic), topic, 0, 0, 30))
    with pytest.raises(kc.OdradekSparkError, match=r"ends at offset 30 .*up to 39"):
        list(fetcher.read_range(_options(boot, topic), topic, 0, 10, 40))
    lenient = _options(boot, topic, failOnDataLoss="false")
    table = _table(fetcher.read_range(lenient, topic, 0, 0, 40), False)
    assert table.column("offset").to_pylist() == list(range(10, 30))


def test_broker_restart_mid_read(tmp_path: Any) -> None:
    with ExitStack() as stack:
        first = stack.enter_context(running_broker(data_dir=tmp_path))
        boot = first.bootstrap
        # back on the port the first one bound (port 0: the system's choice)
        overrides = {"listeners": f"PLAINTEXT://{boot}"}
        topic = _topic(boot)
        _produce(boot, topic, 5000, **{"batch.size": 2000})
        opts = _options(boot, topic, **{"kafka.max.partition.fetch.bytes": "4096"})
        reader = fetcher.read_range(opts, topic, 0, 0, 5000, flush_rows=100)
        got = [next(reader)]
        stack.close()  # the broker goes away mid-read (clean shutdown)
        with running_broker(overrides, data_dir=tmp_path):
            got.extend(reader)
    offsets = _table(got, False).column("offset").to_pylist()
    assert offsets == list(range(5000))


def test_no_broker_is_a_clear_error_without_hang() -> None:
    with refusing_address() as boot:
        opts = _options(boot, "t", **{"kafkaConsumer.pollTimeoutMs": "1500",
                                      "kafka.default.api.timeout.ms": "500"})
        started = time.monotonic()
        with pytest.raises(kc.OdradekSparkError, match=r"timed out after 1500 ms.*cannot"):
            list(fetcher.read_range(opts, "t", 0, 0, 10))
    assert time.monotonic() - started < 10


def test_supports_only_what_it_honours() -> None:
    assert fetcher.supports({"bootstrap.servers": "h:1", "fetch.max.bytes": "1000"})
    assert fetcher.supports({"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"})
    assert fetcher.supports({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                             "ssl.ca.location": "/ca.pem"})
    assert fetcher.supports({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                             "sasl.password": "p"})
    assert not fetcher.supports({"bootstrap.servers": "h:1", "sasl.mechanism": "GSSAPI"})
    assert not fetcher.supports({"bootstrap.servers": "h:1",
                                 "ssl.certificate.location": "/c.pem"})
    assert fetcher.supports({"bootstrap.servers": "h:1", "isolation.level": "read_committed"})
    assert fetcher.supports({"bootstrap.servers": "h:1", "isolation.level": "READ_UNCOMMITTED"})
    assert not fetcher.supports({"bootstrap.servers": "h:1", "isolation.level": "serializable"})

