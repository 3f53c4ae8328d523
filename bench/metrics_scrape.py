"""What a scrape of the broker's /metrics costs at many partitions, and how long it holds
the event loop.

Usage: ``.venv/bin/python bench/metrics_scrape.py [--partitions 1000] [--scrapes 30]``

One broker (``odradek.testing.running_broker``, in this process, its own loop thread) with
``metrics.listener`` set; one topic of N partitions, a record in each (librdkafka), and a
group with an offset committed on every partition (so the page has N log and N lag
series). Then ``--scrapes`` GETs of ``/metrics``, one after the other, reporting: the
snapshot's time on the event loop (what a scrape takes from the loop), the whole GET
(snapshot + text in the HTTP thread), the page's size, and the worst lateness of a 1 ms
ticker running on the broker's loop meanwhile (how long the loop was held), against the
same ticker for 3 s before the first scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.testing import running_broker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    n = args.partitions
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0"}) as rb:
        rb.call(rb.broker.metadata.create_topic, "scraped", n, 1, {})
        producer = Producer({"bootstrap.servers": rb.bootstrap, "linger.ms": 50})
        for p in range(n):
            producer.produce("scraped", b"v" * 100, partition=p)
        assert producer.flush(120) == 0
        consumer = Consumer({"bootstrap.servers": rb.bootstrap, "group.id": "scraper"})
        consumer.commit(offsets=[TopicPartition("scraped", p, 1) for p in range(n)],
                        asynchronous=False)
        consumer.close()
        server = rb.broker.metrics_server
        assert server is not None and server.collector is not None
        lateness: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                before = loop.time()
                await asyncio.sleep(0.001)
                lateness.append(loop.time() - before - 0.001)

        ticking = asyncio.run_coroutine_threadsafe(ticker(), rb.loop)
        time.sleep(3.0)  # the baseline: the same ticker with no scrape
        idle = lateness[:]
        lateness.clear()
        snapshots, gets, size = [], [], 0
        for _ in range(args.scrapes):
            started = time.perf_counter()
            with urllib.request.urlopen(server.url, timeout=30) as response:
                size = len(response.read())
            gets.append(time.perf_counter() - started)
            snapshots.append(server.collector.last_snapshot_s)
        rb.loop.call_soon_threadsafe(stop.set)
        ticking.result(10)

    def ms(values: list[float]) -> str:
        return (f"median {statistics.median(values) * 1000:.1f} ms, "
                f"max {max(values) * 1000:.1f} ms")

    print(f"{n} partitions (+50 of __consumer_offsets), {args.scrapes} scrapes, "
          f"page {size / 1024:.0f} KiB")
    print(f"snapshot on the event loop: {ms(snapshots)}")
    print(f"whole GET /metrics:         {ms(gets)}")
    print(f"1 ms ticker on the loop, lateness while scraping: {ms(lateness)} "
          f"(over {len(lateness)} ticks)")
    print(f"1 ms ticker on the loop, lateness with no scrape: {ms(idle)} "
          f"(over {len(idle)} ticks)")


if __name__ == "__main__":
    main()
