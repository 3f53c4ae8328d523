"""Reading brokers' Prometheus metrics for the console's live charts.

How it works: each ``--metrics-url`` is one broker's ``/metrics`` page (Prometheus text
format), parsed by ``prometheus_client``'s own parser. The console reads the counters
named after Kafka's MBean ``kafka.server:type=BrokerTopicMetrics`` — families whose name,
compared in lower case, starts with ``kafka_server_brokertopicmetrics_`` followed by
``bytesin``, ``bytesout`` or ``messagesin``: the broker's own names
(``kafka_server_brokertopicmetrics_bytesin_total``, the JMX exporter's common Kafka rules)
and the exporter's names without ``lowercaseOutputName``
(``kafka_server_BrokerTopicMetrics_BytesInPerSec``) alike, whatever the suffix
(``_total``, ``_count``, ``PerSec``); a sample with a ``topic`` label counts for that topic, a
sample without one is the broker total (summed over topics when a broker only exports per
topic samples). A rate is the difference of two readings divided by the time between them,
so the first reading of a URL gives no rate yet; a counter that appears between two
readings started at 0, and one that went down (a broker restarted) counts as 0 once.
Anything else on the page is ignored, and an unreachable URL or a page that does not parse
is reported in the answer, not raised.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field

#: The BrokerTopicMetrics meters charted, by the short name the charts use.
METERS = {"bytesin": "bytes_in", "bytesout": "bytes_out", "messagesin": "messages_in"}
PREFIX = "kafka_server_brokertopicmetrics_"
SCRAPE_TIMEOUT = 2.0


@dataclass
class Reading:
    at: float
    broker: dict[str, float]                       # meter -> counter
    topics: dict[tuple[str, str], float]           # (meter, topic) -> counter


def parse(text: str) -> Reading:
    from prometheus_client.parser import text_string_to_metric_families

    broker: dict[str, float] = {}
    topic_sums: dict[str, float] = {}
    topics: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name.lower()
        if not name.startswith(PREFIX):
            continue
        rest = name[len(PREFIX):]
        meter = next((short for long, short in METERS.items() if rest.startswith(long)), None)
        if meter is None:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket", "_sum")):
                continue
            topic = sample.labels.get("topic")
            if topic:
                topics[(meter, topic)] = topics.get((meter, topic), 0.0) + sample.value
                topic_sums[meter] = topic_sums.get(meter, 0.0) + sample.value
            else:
                broker[meter] = broker.get(meter, 0.0) + sample.value
    for meter, total in topic_sums.items():
        broker.setdefault(meter, total)
    return Reading(time.monotonic(), broker, topics)


@dataclass
class MetricsReader:
    urls: list[str]
    last: dict[str, Reading] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def scrape(self) -> dict[str, object]:
        """Rates per second since the previous scrape: per broker (URL) and per topic."""
        brokers: dict[str, dict[str, float]] = {}
        topics: dict[str, dict[str, float]] = {}
        errors: dict[str, str] = {}
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
                    reading = parse(response.read().decode("utf-8", "replace"))
            except Exception as exc:  # unreachable, not Prometheus text: shown, not raised
                errors[url] = f"{type(exc).__name__}: {exc}"
                continue
            with self.lock:
                before = self.last.get(url)
                self.last[url] = reading
            if before is None:
                continue
            dt = max(reading.at - before.at, 1e-3)
            brokers[url] = {m: max(v - before.broker.get(m, 0.0), 0.0) / dt
                            for m, v in reading.broker.items()}
            for (meter, topic), v in reading.topics.items():
                rate = max(v - before.topics.get((meter, topic), 0.0), 0.0) / dt
                per = topics.setdefault(topic, {})
                per[meter] = per.get(meter, 0.0) + rate
        return {"at": time.time(), "brokers": brokers, "topics": topics, "errors": errors}
