"""The TLS reload rules of odradek.server.tls_reload (Kafka's SslFactory.reconfigure),
driven without sockets: listeners are plain objects holding their ListenerSecurity. The
real clients are in tests/interop/test_tls_reload.py."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from odradek.security.tls import TlsConfigError
from odradek.server.config import BrokerConfig
from odradek.server.listener_security import listener_security
from odradek.server.network.security import ListenerSecurity
from odradek.server.tls_reload import TlsReloader, listener_tls_key

NAMES = {"common_name": "broker", "organization_name": "Odradek tests",
         "organization_unit_name": "brokers"}
KEY = "listener.name.ssl.ssl.keystore.location"


@dataclass
class FakeListener:
    security: ListenerSecurity


def keystore(ca: trustme.CA, path: Path, *names: str, **subject: str) -> Path:
    leaf = ca.issue_cert(*(names or ("127.0.0.1", "localhost")), **{**NAMES, **subject})
    leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


def setup(tmp_path: Path, **extra: str) -> tuple[trustme.CA, BrokerConfig, FakeListener,
                                                   TlsReloader]:
    ca = trustme.CA()
    first = keystore(ca, tmp_path / "a.pem")
    config = BrokerConfig.from_raw({
        "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
        "log.dirs": str(tmp_path / "data"),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(first), **extra,
    })
    listener = FakeListener(listener_security(config, "SSL"))
    reloader = TlsReloader(config, [listener])
    reloader.apply({})  # at start, as the broker does: nothing stored, nothing changes
    return ca, config, listener, reloader


def test_only_prefixed_keystore_and_truststore_keys_are_reloadable() -> None:
    assert listener_tls_key(KEY) == ("ssl", "ssl.keystore.location")
    assert listener_tls_key("listener.name.sasl_ssl.ssl.truststore.certificates") == (
        "sasl_ssl", "ssl.truststore.certificates")
    assert listener_tls_key("listener.name.ssl.ssl.client.auth") is None
    assert listener_tls_key("ssl.keystore.location") is None


def test_a_new_key_with_the_same_names_is_swapped_in(tmp_path: Path) -> None:
    ca, _, listener, reloader = setup(tmp_path)
    old = listener.security
    new = keystore(ca, tmp_path / "b.pem")
    reloader.validate({KEY: str(new)})
    assert listener.security is old  # validating changes nothing
    reloader.apply({KEY: str(new)})
    assert listener.security.ssl_context is not old.ssl_context
    assert listener.security.stats is old.stats and listener.security.name == "SSL"
    current = listener.security
    reloader.apply({KEY: str(new)})  # nothing changed: nothing rebuilt
    assert listener.security is current


def test_the_same_location_is_reloaded_once_the_file_changed(tmp_path: Path) -> None:
    ca, _, listener, reloader = setup(tmp_path)
    path = keystore(ca, tmp_path / "b.pem")
    reloader.apply({KEY: str(path)})
    current = listener.security
    keystore(ca, path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    reloader.apply({KEY: str(path)})
    assert listener.security is not current


@pytest.mark.parametrize(("subject", "names", "message"), [
    ({"common_name": "other"}, (), "Keystore DistinguishedName does not match"),
    ({"organization_unit_name": "ops"}, (), "Keystore DistinguishedName does not match"),
    ({}, ("localhost",), "Keystore SubjectAltNames do not match"),
])
def test_the_certificate_keeps_its_subject_and_names(
    tmp_path: Path, subject: dict[str, str], names: tuple[str, ...], message: str
) -> None:
    ca, _, listener, reloader = setup(tmp_path)
    old = listener.security
    bad = keystore(ca, tmp_path / "bad.pem", *names, **subject)
    with pytest.raises(TlsConfigError, match=message):
        reloader.validate({KEY: str(bad)})
    reloader.apply({KEY: str(bad)})  # stored anyway (e.g. by an old broker): refused
    assert listener.security is old


def test_more_names_are_allowed(tmp_path: Path) -> None:
    ca, _, _, reloader = setup(tmp_path)
    wider = keystore(ca, tmp_path / "w.pem", "127.0.0.1", "localhost", "broker.example")
    reloader.validate({KEY: str(wider)})


def test_allow_dn_and_san_changes(tmp_path: Path) -> None:
    ca, _, _, reloader = setup(tmp_path, **{
        "listener.name.ssl.ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"})
    other = keystore(ca, tmp_path / "o.pem", "example.org", common_name="renamed")
    reloader.validate({KEY: str(other)})


def test_no_truststore_can_be_added(tmp_path: Path) -> None:
    ca, _, _, reloader = setup(tmp_path)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with pytest.raises(TlsConfigError, match="Cannot add SSL truststore"):
        reloader.validate({"listener.name.ssl.ssl.truststore.location": str(tmp_path / "ca.pem"),
                           "listener.name.ssl.ssl.truststore.type": "PEM"})


def test_unknown_or_plaintext_listeners_are_refused(tmp_path: Path) -> None:
    _, _, _, reloader = setup(tmp_path)
    with pytest.raises(TlsConfigError, match="no SSL or SASL_SSL listener named PLAINTEXT"):
        reloader.validate({"listener.name.plaintext.ssl.keystore.location": "/x.pem"})


def test_errors_never_show_a_password(tmp_path: Path) -> None:
    _, _, _, reloader = setup(tmp_path)
    secret = "Very-Secret-9"
    dynamic: dict[str, Any] = {KEY: str(tmp_path / "missing.pem"),
                               "listener.name.ssl.ssl.key.password": secret}
    with pytest.raises(TlsConfigError) as raised:
        reloader.validate(dynamic)
    assert secret not in str(raised.value)


def test_at_start_stored_configs_are_taken_as_they_are(tmp_path: Path) -> None:
    """Kafka builds a listener from its stored dynamic configs at start: the rules guard
    changes, so a stored keystore with another subject still serves after a restart."""
    ca = trustme.CA()
    first = keystore(ca, tmp_path / "a.pem")
    other = keystore(ca, tmp_path / "o.pem", common_name="renamed")
    config = BrokerConfig.from_raw({
        "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
        "log.dirs": str(tmp_path / "data"),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(first),
    })
    listener = FakeListener(listener_security(config, "SSL"))
    old = listener.security
    reloader = TlsReloader(config, [listener])
    reloader.apply({KEY: str(other)})
    assert listener.security is not old
    with pytest.raises(TlsConfigError, match="DistinguishedName"):  # back: a change
        reloader.validate({KEY: str(first)})
