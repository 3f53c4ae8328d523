"""``odradek mirror`` between two brokers that take clients over SASL_SSL only (each with
its own CA and users): the source's settings in the Java client's keys
(``--source-command-config``), the target's in librdkafka's (``--target-command-config``).
Every record arrives, and no password appears in the mirror's output."""

from __future__ import annotations

import contextlib
from pathlib import Path

import confluent_kafka as ck
import pytest

from tests.interop._security import (
    USERS,
    bootstrap,
    client_properties,
    confluent_settings,
    secure_broker,
)
from tests.spark.test_mirror import mirror_of, wait_until

RECORDS = 300


@pytest.mark.timeout(600)
def test_mirror_copies_over_sasl_ssl(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        source, source_certs = stack.enter_context(secure_broker(tmp_path / "source"))
        target, target_certs = stack.enter_context(secure_broker(tmp_path / "target"))
        source_settings = {"bootstrap.servers": bootstrap(source, "SASL_SSL"),
                           **confluent_settings(source_certs, "SASL_SSL", "SCRAM-SHA-512")}
        target_settings = {"bootstrap.servers": bootstrap(target, "SASL_SSL"),
                           **confluent_settings(target_certs, "SASL_SSL", "PLAIN", "bob")}
        producer = ck.Producer(source_settings)
        for i in range(RECORDS):
            producer.produce("m.sec", f"v{i}".encode(), f"k{i}".encode())
        assert producer.flush(30) == 0
        del producer

        source_config = client_properties(tmp_path / "source.properties", source_certs,
                                          "SCRAM-SHA-512")
        target_config = tmp_path / "target.properties"
        target_config.write_text("".join(
            f"{k}={v}\n" for k, v in target_settings.items() if k != "bootstrap.servers"))
        log = tmp_path / "mirror.log"
        consumer = ck.Consumer({**target_settings, "group.id": "check"})

        def mirrored() -> int:
            try:
                return int(consumer.get_watermark_offsets(ck.TopicPartition("m.sec", 0),
                                                          timeout=5)[1])
            except ck.KafkaException:
                return -1

        with mirror_of(bootstrap(source, "SASL_SSL"), bootstrap(target, "SASL_SSL"),
                       tmp_path / "ckpt", log, r"m\..*",
                       "--source-command-config", str(source_config),
                       "--target-command-config", str(target_config)) as proc:
            wait_until(lambda: mirrored() == RECORDS or proc.poll() is not None,
                       "every record on the target", 300)
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
        consumer.assign([ck.TopicPartition("m.sec", 0, ck.OFFSET_BEGINNING)])
        values: list[bytes] = []
        while len(values) < RECORDS:
            batch = consumer.consume(RECORDS, timeout=10)
            assert batch, f"read {len(values)} of {RECORDS}"
            values += [m.value() for m in batch if m.error() is None]
        consumer.close()
        assert values == [f"v{i}".encode() for i in range(RECORDS)]
        output = log.read_text(errors="replace")
        assert all(p not in output for p in USERS.values()), output[-4000:]


def test_the_mirror_config_keeps_the_passwords_out_of_its_repr() -> None:
    from odradek.spark.mirror import MirrorConfig

    cfg = MirrorConfig("a:1", "b:1", "x", source_client={"sasl.password": "pw-one"},
                       target_client={"sasl.password": "pw-two"})
    assert "pw-one" not in repr(cfg) and "pw-two" not in repr(cfg)
    assert cfg.target_conf()["sasl.password"] == "pw-two"
