"""Client security configs in both dialects (Java client's, librdkafka's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from odradek.client.security import (
    client_security,
    librdkafka_config,
    librdkafka_settings,
    load_client_properties,
)

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="a=b;c";')


def test_java_style_sasl_ssl(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    path = tmp_path / "client.properties"
    path.write_text(f"# a comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
                    f"sasl.jaas.config={JAAS}\nssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={tmp_path / 'ca.pem'}\n")
    props = load_client_properties(str(path))
    security = client_security(props)
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_SSL", "SCRAM-SHA-256", "alice", "a=b;c")
    assert security.ssl_context is not None and security.ssl_context.check_hostname
    assert "a=b;c" not in repr(security)
    assert librdkafka_settings(props) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice", "sasl.password": "a=b;c",
        "ssl.ca.location": str(tmp_path / "ca.pem")}


def test_librdkafka_style_plain() -> None:
    security = client_security({"security.protocol": "sasl_plaintext",
                                "sasl.mechanisms": "PLAIN", "sasl.username": "bob",
                                "sasl.password": "pw"})
    assert (security.protocol, security.mechanism, security.username) == (
        "SASL_PLAINTEXT", "PLAIN", "bob")
    assert security.ssl_context is None


def test_no_hostname_check_when_asked() -> None:
    security = client_security({"security.protocol": "SSL",
                                "ssl.endpoint.identification.algorithm": ""})
    assert security.ssl_context is not None and not security.ssl_context.check_hostname


@pytest.mark.parametrize(("props", "error"), [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
      "sasl.username": "a"}, "not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs a user"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "Java keystores"),
])
def test_errors(props: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        client_security(props)


def test_librdkafka_config_translates_the_java_keys(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    config = librdkafka_config({
        "bootstrap.servers": "h:1", "linger.ms": "5", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "ca.pem")})
    assert config == {"bootstrap.servers": "h:1", "linger.ms": "5",
                      "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.username": "alice", "sasl.password": "a=b;c",
                      "ssl.ca.location": str(tmp_path / "ca.pem")}


def test_librdkafka_config_keeps_librdkafka_keys_and_refuses_a_pkcs12_truststore(
        tmp_path: Path) -> None:
    plain = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
             "sasl.username": "bob", "sasl.password": "pw", "client.id": "c"}
    assert librdkafka_config(plain) == plain
    with pytest.raises(ValueError, match="PEM only"):
        librdkafka_config({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                           "ssl.truststore.location": str(tmp_path / "t.p12")})


def test_config_providers_keep_the_secrets_out_of_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODRADEK_TEST_PASSWORD", "from-env")
    (tmp_path / "secrets.properties").write_text("bob.password=from-file\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "user").write_text("carol")
    path = tmp_path / "client.properties"
    path.write_text(
        "config.providers=env,file,dir\n"
        "config.providers.env.class=org.apache.kafka.common.config.provider."
        "EnvVarConfigProvider\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider."
        "FileConfigProvider\n"
        "config.providers.dir.class=org.apache.kafka.common.config.provider."
        "DirectoryConfigProvider\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username=${{dir:{tmp_path / 'dir'}:user}}\n"
        "sasl.password=${env:ODRADEK_TEST_PASSWORD}\n"
        f"other=${{file:{tmp_path / 'secrets.properties'}:bob.password}} ${{nope:x}}\n")
    props = load_client_properties(str(path))
    assert props == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": "carol", "sasl.password": "from-env",
                     "other": "from-file ${nope:x}"}
    assert client_security(props).password == "from-env"
    monkeypatch.delenv("ODRADEK_TEST_PASSWORD")
    with pytest.raises(ValueError, match=r"sasl\.password: \$\{env:ODRADEK_TEST_PASSWORD\} "
                                         r"is not set"):
        load_client_properties(str(path))
    with pytest.raises(ValueError, match="not supported"):
        librdkafka_config({"config.providers": "vault",
                           "config.providers.vault.class": "com.example.Vault"})
