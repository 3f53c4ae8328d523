"""Regenerate ``client-requests.bin``: request frames real clients sent (a dev tool, not a test).

Run it from the repository root whenever the corpus should be refreshed::

    PYTHONPATH=src .venv/bin/python tests/server/golden/capture.py

A broker is started with its advertised listener pointing at a recording proxy, so every
connection the clients open (bootstrap and after) goes through the proxy, which forwards
bytes both ways and keeps each complete request frame (size prefix included) the clients
sent. The clients: confluent-kafka (librdkafka) producer (idempotent), consumer in a group
(join, sync, heartbeat, fetch, commit, leave), and admin client; kafka-python's producer
and consumer; aiokafka's producer. The file is the frames back to back, as on the wire;
``tests/server/fuzzing.py`` reads it as the fuzzer's seed corpus. Frames differ from run to
run (client ids, timestamps, generated member ids), so rerunning changes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import threading
import time
from pathlib import Path

OUT = Path(__file__).with_name("client-requests.bin")


class RecordingProxy:
    """Loopback TCP proxy that records the request frames flowing client → broker."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target_port = 0
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buffered = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if not record:
                    continue
                buffered += data
                while len(buffered) >= 4:
                    (size,) = struct.unpack_from(">i", buffered)
                    if len(buffered) < 4 + size:
                        break
                    with self._lock:
                        self.frames.append(buffered[: 4 + size])
                    buffered = buffered[4 + size:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("corpus-a", 2, 1),
                                       NewTopic("corpus-b", 1, 1,
                                                config={"cleanup.policy": "compact"})]).values():
        future.result(30)
    admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "corpus-a")])[
        ConfigResource(ConfigResource.Type.TOPIC, "corpus-a")].result(30)
    admin.create_partitions([NewPartitions("corpus-a", 3)])["corpus-a"].result(30)
    admin.list_topics(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "compression.type": "lz4"})
    for i in range(30):
        producer.produce("corpus-a", key=f"k{i}".encode(), value=b"v" * (i * 7),
                         headers=[("h", b"x")])
        producer.produce("corpus-b", key=f"k{i % 5}".encode(), value=f"{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "corpus-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "heartbeat.interval.ms": 200, "session.timeout.ms": 6000})
    consumer.subscribe(["corpus-a", "corpus-b"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.committed([TopicPartition("corpus-a", 0)], timeout=10)
    consumer.get_watermark_offsets(TopicPartition("corpus-a", 0), timeout=10)
    consumer.offsets_for_times([TopicPartition("corpus-a", 0, 0)], timeout=10)
    consumer.close()
    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups(["corpus-group"])["corpus-group"].result(30)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(10):
        producer.send("corpus-a", key=b"kp", value=b"kafka-python %d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("corpus-a", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", group_id="corpus-kp",
                             consumer_timeout_ms=3000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()


async def aiokafka_producer(bootstrap: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait("corpus-b", b"aiokafka %d" % i, key=b"ak")
    finally:
        await producer.stop()


def main() -> None:
    from odradek.testing import running_broker

    proxy = RecordingProxy()
    overrides = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}
    with running_broker(overrides=overrides) as broker:
        proxy.target_port = broker.port
        bootstrap = f"127.0.0.1:{proxy.port}"
        confluent(bootstrap)
        kafka_python(bootstrap)
        asyncio.run(aiokafka_producer(bootstrap))
        time.sleep(0.5)  # let the proxy threads pass on the last bytes
    frames = list(proxy.frames)
    OUT.write_bytes(b"".join(frames))
    keys = sorted({struct.unpack_from(">h", f, 4)[0] for f in frames})
    print(f"{len(frames)} frames, {sum(map(len, frames))} bytes, API keys {keys} -> {OUT}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
