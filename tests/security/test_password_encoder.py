"""Kafka's PasswordEncoder (odradek.security.password_encoder), without I/O: the round
trip, the encoded form, wrong secrets and damaged values as clean errors, and agreement with
the JVM's own PBKDF2 and AES (tests/security/java/JcePasswordEncoding.java, run with java)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.security.password_encoder import (
    PasswordEncoder,
    PasswordEncoderError,
    is_encoded,
    parse_encoded,
)

SECRET = "broker-secret-1"
PASSWORD = "k3y-pa55-Xq"
JAVA_SOURCE = Path(__file__).parent / "java" / "JcePasswordEncoding.java"


def fields(encoded: str) -> dict[str, str]:
    return parse_encoded(encoded)


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_round_trip_in_kafkas_form(cipher: str) -> None:
    encoder = PasswordEncoder(SECRET, cipher_algorithm=cipher)
    encoded = encoder.encode(PASSWORD)
    assert PASSWORD not in encoded and SECRET not in encoded
    f = fields(encoded)
    assert f["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"  # Kafka's default
    assert f["cipherAlgorithm"] == cipher
    assert (f["keyLength"], f["iterations"], f["passwordLength"]) == ("128", "4096", "11")
    assert {"salt", "initializationVector", "encryptedPassword"} <= set(f)
    assert len(__import__("base64").b64decode(f["salt"])) == 256
    assert ("authenticationTagLength" in f) == (cipher == "AES/GCM/NoPadding")
    assert is_encoded(encoded) and not is_encoded(PASSWORD)
    assert encoder.decode(encoded) == PASSWORD
    assert encoder.encode(PASSWORD) != encoded  # a fresh salt and IV each time


def test_the_length_counts_java_chars() -> None:
    encoder = PasswordEncoder(SECRET)
    password = "pässwörd\U0001F600"  # the emoji is two UTF-16 units, as Java counts
    encoded = encoder.encode(password)
    assert fields(encoded)["passwordLength"] == "10"
    assert encoder.decode(encoded) == password


def test_a_value_is_read_with_its_own_parameters() -> None:
    encoded = PasswordEncoder(SECRET, "PBKDF2WithHmacSHA1", key_length=256,
                              iterations=1024).encode(PASSWORD)
    assert PasswordEncoder(SECRET).decode(encoded) == PASSWORD


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_a_wrong_secret_is_a_clean_error(cipher: str) -> None:
    encoded = PasswordEncoder(SECRET, cipher_algorithm=cipher).encode(PASSWORD)
    for attempt in range(20):  # CBC: a wrong key sometimes unpads; the length check holds
        with pytest.raises(PasswordEncoderError, match="Password could not be decoded") as e:
            PasswordEncoder(f"other-secret-{attempt}").decode(encoded)
        assert PASSWORD not in str(e.value) and SECRET not in str(e.value)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda e: e.replace("encryptedPassword:", "x:"), "not an encoded password"),
    (lambda e: e.replace("iterations:4096", "iterations:many"), "malformed"),
    (lambda e: e.replace("iterations:4096", "iterations:99999999999"), "iterations"),
    (lambda e: e.replace("cipherAlgorithm:AES/CBC/PKCS5Padding", "cipherAlgorithm:DES"),
     "DES is not supported"),
    (lambda e: ",".join(p for p in e.split(",") if not p.startswith("salt:")), "salt"),
    (lambda e: e.replace("salt:", "salt:%%"), "malformed"),
    (lambda e: e.replace("passwordLength:11", "passwordLength:12"), "sanity check"),
    (lambda e: "not an encoded value", "not an encoded password"),
    (lambda e: "", "not an encoded password"),
])
def test_a_damaged_value_is_a_clean_error(damage: object, message: str) -> None:
    encoder = PasswordEncoder(SECRET)
    encoded = encoder.encode(PASSWORD)
    with pytest.raises(PasswordEncoderError, match=message) as raised:
        encoder.decode(damage(encoded))  # type: ignore[operator]
    assert PASSWORD not in str(raised.value)


@pytest.mark.parametrize(("settings", "message"), [
    ({"secret": ""}, "password.encoder.secret is empty"),
    ({"key_factory_algorithm": "PBKDF2WithHmacMD5"}, "keyfactory.algorithm"),
    ({"cipher_algorithm": "AES/ECB/PKCS5Padding"}, "cipher.algorithm"),
    ({"key_length": 64}, "key.length 64"),
    ({"iterations": 100}, "iterations must be between 1024"),
])
def test_settings_that_cannot_work_are_refused(settings: dict[str, object],
                                               message: str) -> None:
    with pytest.raises(PasswordEncoderError, match=message):
        PasswordEncoder(**{"secret": SECRET, **settings})  # type: ignore[arg-type]


def test_from_config() -> None:
    assert PasswordEncoder.from_config({"password.encoder.secret": ""}) is None
    encoder = PasswordEncoder.from_config({
        "password.encoder.secret": SECRET, "password.encoder.old.secret": "old",
        "password.encoder.cipher.algorithm": "AES/GCM/NoPadding",
        "password.encoder.key.length": 256, "password.encoder.iterations": 2048})
    assert encoder is not None and SECRET not in repr(encoder)
    assert (encoder.cipher_algorithm, encoder.key_length, encoder.iterations) == (
        "AES/GCM/NoPadding", 256, 2048)
    old = PasswordEncoder.from_config({"password.encoder.old.secret": "old"},
                                      "password.encoder.old.secret")
    assert old is not None and old.secret == "old"


# -- the JVM's JCE ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    javac, java = shutil.which("javac"), shutil.which("java")
    assert javac and java, "a JDK is needed (Debian's openjdk-17-jdk-headless)"
    out = tmp_path_factory.mktemp("jce")
    subprocess.run([javac, "-d", str(out), str(JAVA_SOURCE)], check=True, timeout=120)
    yield [java, "-cp", str(out), "JcePasswordEncoding"]


@pytest.mark.parametrize(("factory", "cipher", "bits"), [
    ("PBKDF2WithHmacSHA512", "AES/CBC/PKCS5Padding", 128),
    ("PBKDF2WithHmacSHA1", "AES/GCM/NoPadding", 256),
])
def test_java_and_odradek_read_each_other(jce: list[str], factory: str, cipher: str,
                                          bits: int) -> None:
    by_java = subprocess.run([*jce, "encode", SECRET, PASSWORD, factory, cipher, str(bits),
                              "4096"], check=True, capture_output=True, text=True,
                             timeout=60).stdout
    assert PasswordEncoder(SECRET).decode(by_java) == PASSWORD
    ours = PasswordEncoder(SECRET, factory, cipher, bits).encode(PASSWORD)
    read = subprocess.run([*jce, "decode", SECRET, ours], check=True, capture_output=True,
                          text=True, timeout=60).stdout
    assert read == PASSWORD
