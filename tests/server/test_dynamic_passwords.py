"""Dynamic password configs stored encrypted (odradek.server.dynamic_config, Kafka's
DynamicBrokerConfig.toPersistentProps / fromPersistentProps / maybeReEncodePasswords),
over a real EmbeddedStore, without sockets. The brokers, the clients, the restart and
ZooKeeper are in tests/interop/test_dynamic_passwords.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster.metadata import ClusterMetadata
from odradek.cluster.store import EmbeddedStore
from odradek.security.password_encoder import PasswordEncoder, is_encoded
from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.dynamic_config import (
    DYNAMIC_PASSWORD_CONFIGS,
    DynamicBrokerConfig,
    is_password_config,
)

SECRET = "first-secret"
PASSWORD = "Str0ng-Keystore-Pw"
KEY = "listener.name.ssl.ssl.keystore.password"


def dynamic(tmp_path: Path, **settings: str) -> DynamicBrokerConfig:
    config = BrokerConfig.from_raw({"log.dirs": str(tmp_path / "data"),
                                    **{k.replace("_", "."): v for k, v in settings.items()}})
    metadata = ClusterMetadata(EmbeddedStore(tmp_path / "meta.json"), lambda: [0],
                               dict(config.values))
    return DynamicBrokerConfig(config, metadata, None)  # type: ignore[arg-type]


def stored(d: DynamicBrokerConfig) -> dict[str, str]:
    return d.metadata.read_broker_configs("0")


def test_kafkas_dynamic_password_configs() -> None:
    assert {"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password",
            "ssl.keystore.key", "sasl.jaas.config"} <= DYNAMIC_PASSWORD_CONFIGS
    assert "password.encoder.secret" not in DYNAMIC_PASSWORD_CONFIGS  # read-only
    assert is_password_config(KEY)
    assert is_password_config("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config")
    assert not is_password_config("listener.name.ssl.ssl.keystore.location")


def test_passwords_are_encoded_for_the_store_and_decoded_for_readers(tmp_path: Path) -> None:
    d = dynamic(tmp_path, password_encoder_secret=SECRET)
    written = d.to_persistent({KEY: PASSWORD, "log.retention.ms": "1000"}, "0")
    assert written["log.retention.ms"] == "1000"
    assert is_encoded(written[KEY]) and PASSWORD not in written[KEY]
    assert PasswordEncoder(SECRET).decode(written[KEY]) == PASSWORD
    d.metadata.set_broker_configs("0", written)
    assert d.broker_configs("0") == {KEY: PASSWORD, "log.retention.ms": "1000"}
    assert PASSWORD not in (tmp_path / "meta.json").read_text()
    # unchanged, it keeps its stored text; changed, it is encoded again
    assert d.to_persistent({KEY: PASSWORD}, "0", written)[KEY] == written[KEY]
    assert d.to_persistent({KEY: PASSWORD + "2"}, "0", written)[KEY] != written[KEY]


@pytest.mark.parametrize(("settings", "entity", "message"), [
    ({}, "0", "Password encoder secret not configured"),
    ({"password_encoder_secret": SECRET}, "<default>",
     "Password config can be defined only at broker level: " + KEY),
])
def test_refusals_in_kafkas_words(tmp_path: Path, settings: dict[str, str], entity: str,
                                  message: str) -> None:
    d = dynamic(tmp_path, **settings)
    with pytest.raises(ConfigError, match=message) as raised:
        d.to_persistent({KEY: PASSWORD}, entity)
    assert PASSWORD not in str(raised.value)
    assert d.to_persistent({"log.retention.ms": "1"}, entity) == {"log.retention.ms": "1"}


def test_a_value_that_does_not_decode_is_left_out_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = dynamic(tmp_path, password_encoder_secret="another-secret")
    d.metadata.set_broker_configs("0", {KEY: PasswordEncoder(SECRET).encode(PASSWORD),
                                        "log.retention.ms": "5"})
    with caplog.at_level(logging.ERROR):
        assert d.broker_configs("0") == {"log.retention.ms": "5"}
    assert f"Dynamic password config {KEY} of broker 0 could not be decoded" in caplog.text
    assert PASSWORD not in caplog.text and SECRET not in caplog.text


def test_rotation_with_the_old_secret(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = dynamic(tmp_path, password_encoder_secret=SECRET)
    first.metadata.set_broker_configs("0", first.to_persistent({KEY: PASSWORD}, "0"))
    old_text = stored(first)[KEY]
    rotated = dynamic(tmp_path, password_encoder_secret="second-secret",
                      password_encoder_old_secret=SECRET)
    with caplog.at_level(logging.INFO):
        rotated.reencode_passwords()
    assert f"dynamic password configs {KEY} of broker 0 encoded again" in caplog.text
    new_text = stored(rotated)[KEY]
    assert new_text != old_text and PASSWORD not in new_text
    assert PasswordEncoder("second-secret").decode(new_text) == PASSWORD
    assert rotated.broker_configs("0") == {KEY: PASSWORD}
    # the old secret left in server.properties: nothing left to rotate, nothing written
    version = rotated.metadata.store.get("/config/brokers/0")
    again = dynamic(tmp_path, password_encoder_secret="second-secret",
                    password_encoder_old_secret=SECRET)
    again.reencode_passwords()
    assert stored(again)[KEY] == new_text
    assert again.metadata.store.get("/config/brokers/0") == version


def test_passwords_an_older_odradek_stored_in_clear(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    without = dynamic(tmp_path)
    without.metadata.set_broker_configs("0", {KEY: PASSWORD})  # as before encryption
    with caplog.at_level(logging.WARNING):
        assert without.broker_configs("0") == {KEY: PASSWORD}  # still served
    assert "stored in clear" in caplog.text and "set password.encoder.secret" in caplog.text
    without.reencode_passwords()  # no secret: nothing to encode with
    assert stored(without)[KEY] == PASSWORD
    with_secret = dynamic(tmp_path, password_encoder_secret=SECRET)
    with_secret.reencode_passwords()
    assert PasswordEncoder(SECRET).decode(stored(with_secret)[KEY]) == PASSWORD
    assert PASSWORD not in (tmp_path / "meta.json").read_text()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("password.encoder.cipher.algorithm", "DES/CBC/PKCS5Padding", "must be one of"),
    ("password.encoder.keyfactory.algorithm", "PBKDF2WithHmacMD5", "must be one of"),
    ("password.encoder.key.length", "100", "must be 128, 192 or 256"),
    ("password.encoder.iterations", "1000", "must be between 1024"),
])
def test_encoder_settings_that_cannot_work_refuse_to_start(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    raw: dict[str, Any] = {"log.dirs": str(tmp_path), "password.encoder.secret": SECRET,
                           key: value}
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_raw(raw)


def test_a_password_stored_in_clear_is_encoded_by_the_next_write(tmp_path: Path) -> None:
    """A clear password that reached the store after this broker's start (an older
    Odradek's write during a rolling upgrade, a tool writing the store) is encoded by the
    next alter that writes the entity, whether it sets that password to the same value or
    changes another key: an unchanged password keeps its stored text only when that text
    is encoded."""
    d = dynamic(tmp_path, password_encoder_secret=SECRET)
    d.metadata.set_broker_configs("0", {KEY: PASSWORD})
    clear = stored(d)
    same = d.to_persistent({KEY: PASSWORD}, "0", clear)
    other = d.to_persistent({**d.from_persistent(clear, "0"), "log.retention.ms": "5"}, "0",
                            clear)
    for written in (same, other):
        assert is_encoded(written[KEY]) and PASSWORD not in written[KEY]
        assert PasswordEncoder(SECRET).decode(written[KEY]) == PASSWORD
    # without a secret there is nothing to encode with: the stored text stays (a warning
    # at start says so), the alter is not refused for a password it does not set
    without = dynamic(tmp_path / "none")
    assert without.to_persistent({KEY: PASSWORD, "log.retention.ms": "5"}, "0",
                                 clear) == {KEY: PASSWORD, "log.retention.ms": "5"}


def test_every_stored_password_is_decoded_once_however_many_there_are(tmp_path: Path) -> None:
    """PBKDF2 costs milliseconds (16 to 40 on a busy machine at Kafka's 4,096 iterations)
    and the decode runs on the event loop of a single broker: with more password configs
    stored than the decoded cache held (256), each read decoded them all again, and an
    unrelated IncrementalAlterConfigs stalled the broker for 11 s with 300 stored. The
    cache keeps every password still stored."""
    decodes = []

    class Counting(PasswordEncoder):
        def decode(self, encoded: str) -> str:
            decodes.append(encoded)
            return super().decode(encoded)

    d = dynamic(tmp_path, password_encoder_secret=SECRET)
    d.password_encoder = Counting(SECRET, iterations=1024)
    keys = {f"listener.name.l{i}.ssl.key.password": f"pw-{i}" for i in range(300)}
    d.metadata.set_broker_configs("0", d.to_persistent(keys, "0"))
    assert d.broker_configs("0") == keys
    assert len(decodes) == 300
    assert d.broker_configs("0") == keys  # the next read: none decoded again
    assert len(decodes) == 300


def test_a_stored_password_that_does_not_decode_costs_one_decode_and_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """password.encoder.secret changed without password.encoder.old.secret: no stored
    password decodes. Each is tried once (PBKDF2 on the event loop, at every read: each
    alter reads twice) and said once in the log, not at every read."""
    decodes = []

    class Counting(PasswordEncoder):
        def decode(self, encoded: str) -> str:
            decodes.append(encoded)
            return super().decode(encoded)

    d = dynamic(tmp_path, password_encoder_secret="another-secret")
    d.password_encoder = Counting("another-secret", iterations=1024)
    first = PasswordEncoder(SECRET, iterations=1024)
    d.metadata.set_broker_configs("0", {f"listener.name.l{i}.ssl.key.password":
                                        first.encode(f"pw-{i}") for i in range(3)})
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert d.broker_configs("0") == {}
    assert len(decodes) == 3
    assert caplog.text.count("Dynamic password config") == 3
