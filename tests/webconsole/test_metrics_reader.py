"""The console's metrics reader against a real Prometheus exporter (prometheus_client's HTTP
server) exporting Kafka-named BrokerTopicMetrics counters, as a broker would."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from odradek.webconsole.metrics import MetricsReader, parse
from tests.interop._broker import free_port


def test_rates_per_broker_and_topic_from_a_real_exporter() -> None:
    registry = CollectorRegistry()
    bytes_in = Counter("kafka_server_BrokerTopicMetrics_BytesInPerSec", "bytes in",
                       ["topic"], registry=registry)
    messages_in = Counter("kafka_server_BrokerTopicMetrics_MessagesInPerSec", "msgs in",
                          ["topic"], registry=registry)
    Counter("kafka_server_ReplicaManager_PartitionCount", "ignored", registry=registry).inc(7)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        reader = MetricsReader([url, "http://127.0.0.1:1/metrics"])
        first = reader.scrape()
        assert first["brokers"] == {}  # one reading gives no rate yet
        assert "http://127.0.0.1:1/metrics" in first["errors"]  # reported, not raised
        bytes_in.labels("orders").inc(3000)
        bytes_in.labels("audit").inc(1000)
        messages_in.labels("orders").inc(30)
        t0 = time.monotonic()
        second = reader.scrape()
        elapsed = time.monotonic() - t0 + 0.001
        brokers = second["brokers"]
        topics = second["topics"]
        assert isinstance(brokers, dict) and isinstance(topics, dict)
        # rates are totals / seconds between the two readings, so positive and proportional
        assert brokers[url]["bytes_in"] > 0
        assert topics["orders"]["bytes_in"] == pytest.approx(3 * topics["audit"]["bytes_in"])
        assert topics["orders"]["bytes_in"] == pytest.approx(
            100 * topics["orders"]["messages_in"])
        assert brokers[url]["bytes_in"] >= 4000 / (elapsed + 60)
        assert "PartitionCount" not in str(second)
    finally:
        server.shutdown()
        thread.join(5)


def test_parse_accepts_untyped_and_total_samples() -> None:
    text = (
        "# TYPE kafka_server_BrokerTopicMetrics_BytesOutPerSec_total counter\n"
        "kafka_server_BrokerTopicMetrics_BytesOutPerSec_total 42\n"
        'kafka_server_BrokerTopicMetrics_MessagesInPerSec{topic="t"} 5\n'
        'kafka_server_BrokerTopicMetrics_MessagesInPerSec{topic="u"} 6\n'
        "something_else 1\n"
    )
    reading = parse(text)
    assert reading.broker == {"bytes_out": 42.0, "messages_in": 11.0}
    assert reading.topics == {("messages_in", "t"): 5.0, ("messages_in", "u"): 6.0}


def test_parse_reads_the_broker_own_names() -> None:
    """The broker's /metrics (odradek.server.metrics) uses the JMX exporter's lower-case
    names: a topic-less sample is the broker total, the others count per topic."""
    text = (
        "# TYPE kafka_server_brokertopicmetrics_bytesin counter\n"
        "kafka_server_brokertopicmetrics_bytesin_total 300\n"
        'kafka_server_brokertopicmetrics_bytesin_total{topic="t"} 100\n'
        'kafka_server_brokertopicmetrics_bytesin_total{topic="u"} 200\n'
        "# TYPE kafka_server_brokertopicmetrics_bytesout counter\n"
        'kafka_server_brokertopicmetrics_bytesout_total{topic="t"} 7\n'
        "# TYPE kafka_server_brokertopicmetrics_replicationbytesout counter\n"
        "kafka_server_brokertopicmetrics_replicationbytesout_total 9\n"
        "# TYPE kafka_server_brokertopicmetrics_totalproducerequests counter\n"
        "kafka_server_brokertopicmetrics_totalproducerequests_total 4\n"
    )
    reading = parse(text)
    assert reading.broker == {"bytes_in": 300.0, "bytes_out": 7.0}
    assert reading.topics == {("bytes_in", "t"): 100.0, ("bytes_in", "u"): 200.0,
                              ("bytes_out", "t"): 7.0}
