"""The broker's Prometheus endpoint (``metrics.listener``), scraped over HTTP and read with
``prometheus_client``'s own text parser, against what real clients did: records produced
by librdkafka one request each, read back by a librdkafka group consumer, offsets committed,
one request answered with an error; and the start-up errors of a bad listener."""

from __future__ import annotations

import asyncio
import datetime
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.static.primitive import i8, i32
from prometheus_client.parser import text_string_to_metric_families

from odradek.client.connection import BrokerConnection
from odradek.protocol.errors import ErrorCode
from odradek.server.config import BrokerConfig, ConfigError
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import describe, expired

TOPIC = "metered"
PRODUCED = {0: 12, 1: 8}  # records per partition, one Produce request each
COMMITTED = {0: 10, 1: 3}  # lag 2 and 5
VALUE = b"v" * 200

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    started = time.monotonic()
    while True:
        result = check()
        if result:
            return result
        if expired(started, timeout):
            raise AssertionError(f"timed out waiting for {what}: {describe(started, timeout)}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0"}) as running:
        yield running


def test_scrape_matches_what_the_clients_did(broker: RunningBroker) -> None:
    server = broker.broker.metrics_server
    assert server is not None
    url = server.url
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # flush.messages=1: every append is flushed (fsync), for the flush timer
    admin.create_topics([NewTopic(TOPIC, len(PRODUCED), 1, config={"flush.messages": "1"})])[
        TOPIC].result(30)
    before = scrape(url)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for partition, count in PRODUCED.items():
        for _ in range(count):
            producer.produce(TOPIC, VALUE, partition=partition)
            assert producer.flush(30) == 0  # one record, one Produce request
    records = sum(PRODUCED.values())

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metered-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.subscribe([TOPIC])
    read = 0
    started = time.monotonic()
    while read < records and not expired(started, 60):
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            read += 1
    assert read == records, f"read {read} of {records} in {describe(started, 60)}"
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)

    def fetch_waited() -> bool:
        # caught up, the consumer's fetches wait for data (fetch.wait.max.ms) in the
        # purgatory: Kafka's RemoteTimeMs, not LocalTimeMs
        consumer.poll(0.2)
        return value(scrape(url), "kafka_network_requestmetrics_remotetimems_sum",
                     request="Fetch") > 0

    wait_for("a Fetch that waited in the purgatory", fetch_waited)
    after = scrape(url)

    # BrokerTopicMetrics: the bytes in are the batches as stored, byte for byte
    data = broker.broker.config.log_dirs[0]
    on_disk = {p: sum(f.stat().st_size for f in (data / f"{TOPIC}-{p}").glob("*.log"))
               for p in PRODUCED}
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    assert bytes_in == sum(on_disk.values()) > records * len(VALUE)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total",
                 topic=TOPIC) == records
    assert value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total",
                 topic=TOPIC) == records
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total",
                 topic=TOPIC) == 0
    grew = (value(after, "kafka_server_brokertopicmetrics_bytesin_total")
            - value(before, "kafka_server_brokertopicmetrics_bytesin_total"))
    assert grew == bytes_in  # the broker total: only this topic was produced to since
    # every stored byte was fetched by the consumer, at least once
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic=TOPIC) >= bytes_in
    assert value(after, "kafka_server_brokertopicmetrics_totalfetchrequests_total",
                 topic=TOPIC) >= 1

    # RequestMetrics: the Produce requests, and their time split as Kafka splits it
    produces = (total(after, "kafka_network_requestmetrics_requests_total", request="Produce")
                - total(before, "kafka_network_requestmetrics_requests_total",
                        request="Produce"))
    assert produces == records
    count = value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert count == total(after, "kafka_network_requestmetrics_requests_total",
                          request="Produce")
    parts = sum(value(after, f"kafka_network_requestmetrics_{part}_sum", request="Produce")
                for part in ("requestqueuetimems", "localtimems", "remotetimems",
                             "responsequeuetimems", "responsesendtimems"))
    assert parts == pytest.approx(
        value(after, "kafka_network_requestmetrics_totaltimems_sum", request="Produce"))
    assert value(after, "kafka_network_requestmetrics_totaltimems_bucket",
                 request="Produce", le="+Inf") == count
    assert total(after, "kafka_network_requestmetrics_requests_total",
                 request="ApiVersions") >= 2
    assert total(after, "kafka_network_requestmetrics_requests_total", request="JoinGroup") >= 1

    # consumer lag, as kafka-lag-exporter reports it
    for partition, committed in COMMITTED.items():
        labels = {"group": "metered-group", "topic": TOPIC, "partition": str(partition)}
        assert value(after, "kafka_consumergroup_group_offset", **labels) == committed
        assert value(after, "kafka_consumergroup_group_lag", **labels) == (
            PRODUCED[partition] - committed)
    assert value(after, "kafka_consumergroup_group_max_lag", group="metered-group") == 5
    assert value(after, "kafka_consumergroup_group_sum_lag", group="metered-group") == 7
    assert value(after, "kafka_coordinator_group_groupmetadatamanager_numgroupsstable") == 1
    consumer.close()
    assert wait_for("the group to become Empty", lambda: value(
        scrape(url), "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") == 1)

    # logs: sizes and segments as on disk
    for partition in PRODUCED:
        labels = {"topic": TOPIC, "partition": str(partition)}
        assert value(after, "kafka_log_log_size", **labels) == on_disk[partition]
        assert value(after, "kafka_log_log_numlogsegments", **labels) == 1
        assert value(after, "kafka_log_log_logendoffset", **labels) == PRODUCED[partition]
        assert value(after, "kafka_cluster_partition_laststableoffsetlag", **labels) == 0

    flushes = "kafka_log_logflushstats_logflushrateandtimems_count"
    assert value(after, flushes) - value(before, flushes) >= records

    # the single node: every partition led here, fully replicated, its own controller
    partitions = value(after, "kafka_server_replicamanager_partitioncount")
    assert partitions >= len(PRODUCED)
    assert value(after, "kafka_server_replicamanager_leadercount") == partitions
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    # the cleaner is alive (seed 002: a dead one must show)
    assert value(after, "kafka_log_logcleaner_deadthreadcount") == 0
    assert value(after, "kafka_log_logcleanermanager_uncleanable_partitions_count") == 0
    # the process, and the producer's and consumer's connections
    assert total(after, "kafka_server_socket_server_metrics_connection_count") >= 2
    assert value(after, "process_open_fds") > 0
    assert value(after, "process_resident_memory_bytes") > 0

    # a deleted topic's counters go; the broker's totals keep what they counted
    admin.delete_topics([TOPIC])[TOPIC].result(30)
    bytes_in_name = "kafka_server_brokertopicmetrics_bytesin_total"
    gone = wait_for("the deleted topic's counters gone", lambda: (
        page if (bytes_in_name, frozenset({("topic", TOPIC)})) not in (page := scrape(url))
        else None))
    assert value(gone, bytes_in_name) == value(after, bytes_in_name)


def test_errors_are_counted_by_request_and_code(broker: RunningBroker) -> None:
    server = broker.broker.metrics_server
    assert server is not None
    name = "kafka_network_requestmetrics_errors_total"

    async def heartbeat() -> Any:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            return await conn.send(HeartbeatRequest(
                group_id="no-such-group", generation_id=1, member_id="nobody",
                group_instance_id=None))
        finally:
            await conn.close()

    before = scrape(server.url)
    response = asyncio.run(heartbeat())
    error = ErrorCode(response.error_code).name.upper()
    assert error != "NONE"
    after = scrape(server.url)
    assert after.get((name, frozenset({("request", "Heartbeat"), ("error", error)}))) == (
        before.get((name, frozenset({("request", "Heartbeat"), ("error", error)})), 0) + 1)


def test_a_hot_path_answers_top_level_error_is_counted(broker: RunningBroker) -> None:
    """A Fetch for a session the broker does not know is answered by the hot-path writer
    (bytes, not a kio object) with FETCH_SESSION_ID_NOT_FOUND: counted all the same."""
    server = broker.broker.metrics_server
    assert server is not None
    name = "kafka_network_requestmetrics_errors_total"
    labels = frozenset({("request", "Fetch"), ("error", "FETCH_SESSION_ID_NOT_FOUND")})

    async def fetch() -> Any:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            return await conn.send(FetchRequest(
                replica_id=i32(-1), max_wait=datetime.timedelta(0), min_bytes=i32(1),
                max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(424242),
                session_epoch=i32(3), topics=(), forgotten_topics_data=(), rack_id=""))
        finally:
            await conn.close()

    before = scrape(server.url).get((name, labels), 0)
    response = asyncio.run(fetch())
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    assert scrape(server.url).get((name, labels)) == before + 1


def test_nothing_is_counted_when_metrics_are_off() -> None:
    with running_broker() as plain:
        assert plain.broker.metrics_server is None
        assert plain.broker.request_stats is None and plain.broker.topic_stats is None


# -- start-up errors -----------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["tcp://127.0.0.1:9644", "http://127.0.0.1", "127.0.0.1:9644",
                                 "http://127.0.0.1:70000", "http://127.0.0.1:9644/other"])
def test_a_bad_listener_is_refused_with_the_key_named(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.listener.*expected http://host:port"):
        BrokerConfig.load(overrides=[f"metrics.listener={bad}"])


def _serve(tmp_path: Path, metrics: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"{prelude}import sys\nfrom odradek.cli.main import main\n"
            f"sys.exit(main(['serve', '--override', 'listeners=PLAINTEXT://127.0.0.1:{port}',"
            f" '--override', 'log.dirs={tmp_path / 'data'}',"
            f" '--override', 'metrics.listener={metrics}']))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_a_taken_port_is_one_line_at_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(tmp_path, f"http://127.0.0.1:{port}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"odradek: cannot start: metrics.listener http://127.0.0.1:{port}: cannot listen: "
        "Address already in use")


@pytest.mark.parametrize("module", ["prometheus_client", "numpy"])
def test_a_missing_metrics_extra_is_one_line_at_start(tmp_path: Path, module: str) -> None:
    # the broker's own entry point, with one of the metrics extra made unimportable (a
    # finder that refuses it: a None in sys.modules would trip libraries that only
    # check whether numpy was imported)
    prelude = ("import sys\n"
               "class Refuse:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               f"        if name.partition('.')[0] == {module!r}:\n"
               "            raise ImportError(name)\n"
               "sys.meta_path.insert(0, Refuse())\n")
    done = _serve(tmp_path, "http://127.0.0.1:0", prelude=prelude)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"odradek: cannot start: metrics.listener is set but {module} is not "
        "installed: pip install 'odradek[metrics]'")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_cleaner_thread_shows(tmp_path: Path) -> None:
    """Seed 002: a cleaner thread that died silently left compaction off for good. Here
    its death is on the page until the broker's health check restarts it."""
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0",
                                   "log.cleaner.backoff.ms": "50"}) as rb:
        server = rb.broker.metrics_server
        cleaner = rb.broker.log_cleaner
        assert server is not None and cleaner is not None
        dead = "kafka_log_logcleaner_deadthreadcount"
        assert value(scrape(server.url), dead) == 0
        real = cleaner.clean_one
        died: list[bool] = []

        def boom(thread_cleaner: Any) -> bool:
            if not died:
                died.append(True)
                raise SystemExit("simulated cleaner thread death")
            return real(thread_cleaner)

        cleaner.clean_one = boom  # type: ignore[method-assign]
        wait_for("the dead thread on the page", lambda: value(scrape(server.url), dead) == 1)
        wait_for("the thread restarted", lambda: value(scrape(server.url), dead) == 0)


def test_client_quota_rates_are_tagged_with_user_and_client_id(broker: RunningBroker) -> None:
    """Kafka's Produce byte-rate sensor, tagged as its DefaultQuotaCallback tags it: a user
    quota measures the user (client-id tag empty), a user + client-id quota the pair."""
    server = broker.broker.metrics_server
    assert server is not None
    metadata = broker.broker.metadata

    def set_quotas(configs: dict[str, str]) -> None:  # on the broker's loop, as a handler
        async def write() -> None:
            metadata.set_client_quotas(("ANONYMOUS", None), configs)
            metadata.set_client_quotas(("ANONYMOUS", "tagged-app"), configs)

        asyncio.run_coroutine_threadsafe(write(), broker.loop).result(30)

    set_quotas({"producer_byte_rate": "1000000000"})
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("quota-metered", 1, 1)])["quota-metered"].result(30)
        for client_id in ("plain-app", "tagged-app"):
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                 "client.id": client_id})
            producer.produce("quota-metered", VALUE)
            assert producer.flush(30) == 0
        samples = scrape(server.url)
        assert value(samples, "kafka_server_produce_byte_rate",
                     user="ANONYMOUS", client_id="") > 0
        assert value(samples, "kafka_server_produce_byte_rate",
                     user="ANONYMOUS", client_id="tagged-app") > 0
        assert not any(n == "kafka_server_produce_byte_rate" and ("client_id", "plain-app") in ls
                       for n, ls in samples)
    finally:
        set_quotas({})


def test_a_consumer_group_is_counted_by_protocol_and_state_and_its_lag_shown(
        broker: RunningBroker) -> None:
    """A KIP-848 consumer group (confluent-kafka, ``group.protocol=consumer``) is counted
    as one (Kafka 4's group-coordinator-metrics: group-count by protocol, consumer-group-count
    by state), not as an Empty classic group by the record of its committed offsets; its lag
    is reported as a classic group's is."""
    server = broker.broker.metrics_server
    assert server is not None
    url = server.url
    topic, group = "metered-kip848", "metered-consumer-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in PRODUCED.items():
        for _ in range(count):
            producer.produce(topic, VALUE, partition=partition)
    assert producer.flush(30) == 0
    before = scrape(url)
    classic_before = value(before, "kafka_server_group_coordinator_metrics_group_count",
                           protocol="classic")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])

        def assigned() -> bool:
            consumer.poll(0.1)
            return len(consumer.assignment()) == 2

        wait_for("both partitions assigned", assigned)
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()],
                        asynchronous=False)

        def stable() -> Samples | None:
            consumer.poll(0.05)
            samples = scrape(url)
            counted = value(samples, "kafka_server_group_coordinator_metrics_consumer_group_count",
                            state="Stable")
            return samples if counted == 1 else None

        after = wait_for("the consumer group counted Stable", stable)
        assert value(after, "kafka_server_group_coordinator_metrics_group_count",
                     protocol="consumer") == 1
        assert value(after, "kafka_server_group_coordinator_metrics_group_count",
                     protocol="classic") == classic_before
        for state in ("Empty", "Assigning", "Reconciling", "Dead"):
            assert value(after, "kafka_server_group_coordinator_metrics_consumer_group_count",
                         state=state) == 0
        for partition, committed in COMMITTED.items():
            labels = {"group": group, "topic": topic, "partition": str(partition)}
            assert value(after, "kafka_consumergroup_group_offset", **labels) == committed
            assert value(after, "kafka_consumergroup_group_lag", **labels) == (
                PRODUCED[partition] - committed)
        assert value(after, "kafka_consumergroup_group_sum_lag", group=group) == 7
    finally:
        consumer.close()
    assert wait_for("the consumer group counted Empty", lambda: value(
        scrape(url), "kafka_server_group_coordinator_metrics_consumer_group_count",
        state="Empty") == 1)
