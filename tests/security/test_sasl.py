"""The SASL state machines: RFC 5802 / RFC 7677 test vectors, PLAIN, JAAS configs."""

from __future__ import annotations

import base64

import pytest

from odradek.security import sasl
from odradek.security.sasl import (
    PlainServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
    credential_from_salted,
    make_scram_credential,
    parse_jaas_config,
    plain_users,
)

# RFC 7677 section 3 (SCRAM-SHA-256): user "user", password "pencil".
RFC7677 = dict(
    mechanism="SCRAM-SHA-256", client_nonce="rOprNGfwEbeRWgbNEkqO",
    server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", salt="W22ZaJ0SNY7soEsUEjb6gQ==",
    proof="dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    signature="6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
)
# RFC 5802 section 5 (SCRAM-SHA-1, the same machine with SHA-1).
RFC5802 = dict(
    mechanism="SCRAM-SHA-1", client_nonce="fyko+d2lbbFgONRv9qkxdawL",
    server_nonce="3rfcNHYJY1ZVvWVs7j", salt="QSXCR+Q6sek8bf92",
    proof="v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=", signature="rmF9pqV8S7suAoZWja4dJRkFsKQ=",
)


@pytest.fixture
def with_sha1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sasl.SCRAM_MECHANISMS, "SCRAM-SHA-1", "sha1")


@pytest.mark.parametrize("vector", [RFC7677, RFC5802], ids=["rfc7677", "rfc5802"])
def test_scram_rfc_test_vectors(vector: dict[str, str], with_sha1: None) -> None:
    mech = vector["mechanism"]
    credential = make_scram_credential(mech, "pencil", 4096, base64.b64decode(vector["salt"]))
    server = ScramServer(mech, nonce=lambda: vector["server_nonce"])
    assert server.client_first(f"n,,n=user,r={vector['client_nonce']}".encode()) == "user"
    nonce = vector["client_nonce"] + vector["server_nonce"]
    assert server.server_first(credential) == (
        f"r={nonce},s={vector['salt']},i=4096".encode())
    final = server.client_final(f"c=biws,r={nonce},p={vector['proof']}".encode())
    assert final == f"v={vector['signature']}".encode()
    assert server.complete and server.username == "user"


def test_scram_wrong_proof_fails_without_telling_why() -> None:
    v = RFC7677
    credential = make_scram_credential("SCRAM-SHA-256", "not-pencil", 4096,
                                       base64.b64decode(v["salt"]))
    server = ScramServer("SCRAM-SHA-256", nonce=lambda: v["server_nonce"])
    server.client_first(f"n,,n=user,r={v['client_nonce']}".encode())
    server.server_first(credential)
    nonce = v["client_nonce"] + v["server_nonce"]
    with pytest.raises(SaslAuthenticationError) as caught:
        server.client_final(f"c=biws,r={nonce},p={v['proof']}".encode())
    assert str(caught.value) == ("Authentication failed during authentication due to invalid "
                                 "credentials with SASL mechanism SCRAM-SHA-256")
    assert not server.complete


def test_scram_unknown_user_fails_as_a_wrong_password() -> None:
    server = ScramServer("SCRAM-SHA-512")
    server.client_first(b"n,,n=nobody,r=abc")
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.server_first(None)


@pytest.mark.parametrize(("first", "error"), [
    (b"n,,n=user", "Invalid SCRAM client first message"),
    (b"p=tls-unique,,n=user,r=abc", "Invalid SCRAM client first message"),
    (b"n,a=admin,n=user,r=abc", "authorization id that is different"),
    (b"n,,n=us=er,r=abc", "bad escape"),
    (b"n,,n=user,r=abc,tokenauth=true", "delegation tokens"),
])
def test_scram_bad_client_first(first: bytes, error: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=error):
        ScramServer("SCRAM-SHA-256").client_first(first)


def test_scram_accepts_old_librdkafkas_doubled_client_nonce() -> None:
    v = RFC7677
    credential = make_scram_credential("SCRAM-SHA-256", "pencil", 4096,
                                       base64.b64decode(v["salt"]))
    server = ScramServer("SCRAM-SHA-256", nonce=lambda: v["server_nonce"])
    server.client_first(f"n,,n=user,r={v['client_nonce']}".encode())
    server.server_first(credential)
    doubled = v["client_nonce"] * 2 + v["server_nonce"]
    # the proof covers the message as sent; only its nonce form is checked here
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.client_final(f"c=biws,r={doubled},p={v['proof']}".encode())


def test_scram_client_final_checks_nonce_and_binding() -> None:
    credential = make_scram_credential("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-256", nonce=lambda: "S")
    server.client_first(b"n,,n=u=2Cv,r=C")
    assert server.username == "u,v"  # saslname escapes
    server.server_first(credential)
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        server.client_final(b"c=biws,r=CX,p=AAAA")
    server2 = ScramServer("SCRAM-SHA-256", nonce=lambda: "S")
    server2.client_first(b"n,,n=u,r=C")
    server2.server_first(credential)
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        server2.client_final(b"c=eSws,r=CS,p=AAAA")


@pytest.mark.parametrize("vector", [RFC7677, RFC5802], ids=["rfc7677", "rfc5802"])
def test_scram_client_rfc_test_vectors(vector: dict[str, str], with_sha1: None) -> None:
    from odradek.security.sasl import ScramClient

    mech = vector["mechanism"]
    client = ScramClient(mech, "user", "pencil", nonce=lambda: vector["client_nonce"])
    assert client.client_first() == f"n,,n=user,r={vector['client_nonce']}".encode()
    nonce = vector["client_nonce"] + vector["server_nonce"]
    final = client.client_final(f"r={nonce},s={vector['salt']},i=4096".encode())
    assert final == f"c=biws,r={nonce},p={vector['proof']}".encode()
    client.verify_server_final(f"v={vector['signature']}".encode())
    with pytest.raises(SaslAuthenticationError, match="signature"):
        client.verify_server_final(b"v=AAAA")


def test_scram_client_and_server_agree() -> None:
    from odradek.security.sasl import ScramClient

    credential = make_scram_credential("SCRAM-SHA-512", "s3cret", 4096)
    client = ScramClient("SCRAM-SHA-512", "a,b=c", "s3cret")
    server = ScramServer("SCRAM-SHA-512")
    assert server.client_first(client.client_first()) == "a,b=c"
    final = server.client_final(client.client_final(server.server_first(credential)))
    client.verify_server_final(final)


def test_credential_text_is_kafkas() -> None:
    credential = make_scram_credential("SCRAM-SHA-512", "secret", 8192, b"salty")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == credential
    with pytest.raises(ValueError):
        ScramCredential.from_text("salt=x")


def test_credential_from_salted_matches_from_password() -> None:
    import hashlib
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    assert credential_from_salted("SCRAM-SHA-256", salted, b"salt", 4096) == \
        make_scram_credential("SCRAM-SHA-256", "pw", 4096, b"salt")


# -- PLAIN (RFC 4616) ----------------------------------------------------------------------
USERS = {"alice": "alice-secret", "admin": "admin-secret"}


def test_plain_authenticates() -> None:
    server = PlainServer(USERS)
    assert server.evaluate(b"\0alice\0alice-secret") == b""
    assert server.complete and server.username == "alice"
    assert PlainServer(USERS).evaluate(b"alice\0alice\0alice-secret") == b""


@pytest.mark.parametrize(("token", "error"), [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0nobody\0alice-secret", "Authentication failed: Invalid username or password"),
    (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\0\0pw", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"admin\0alice\0alice-secret", "authorization id that is different from username"),
])
def test_plain_failures(token: bytes, error: str) -> None:
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(token)
    assert str(caught.value) == error or error in str(caught.value)
    assert "secret" not in str(caught.value) and not server.complete


# -- JAAS ----------------------------------------------------------------------------------
def test_jaas_config_as_kafka_writes_it() -> None:
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
            '  username="admin" password="admin-secret"\n'
            '  user_admin="admin-secret" user_alice="a;b \\"c\\"" ;')
    (module,) = parse_jaas_config(text)
    assert module.login_module.endswith("PlainLoginModule") and module.flag == "required"
    assert module.options["user_alice"] == 'a;b "c"'
    assert plain_users(text) == {"admin": "admin-secret", "alice": 'a;b "c"'}


def test_jaas_config_other_modules_give_no_plain_users() -> None:
    text = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username=admin password=x;')
    assert plain_users(text) == {}


@pytest.mark.parametrize("text", [
    "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"x\"",
    "org.apache.kafka.common.security.plain.PlainLoginModule always;",
    "PlainLoginModule;",
    "",
])
def test_jaas_config_errors(text: str) -> None:
    with pytest.raises(ValueError, match="JAAS"):
        parse_jaas_config(text)


@pytest.mark.parametrize("iterations", [1, 4095, 16385])
def test_scram_refuses_a_stored_credential_with_iterations_out_of_bounds(
    iterations: int,
) -> None:
    """Kafka's ScramSaslServer checks the stored count at every login (a credential
    written around AlterUserScramCredentials' checks must not weaken it): the login fails
    as a wrong password does (issue 47)."""
    credential = make_scram_credential("SCRAM-SHA-256", "pencil", 4096)
    weak = sasl.ScramCredential(credential.salt, credential.stored_key, credential.server_key,
                                iterations)
    server = ScramServer("SCRAM-SHA-256")
    server.client_first(b"n,,n=user,r=abc")
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.server_first(weak)


@pytest.mark.parametrize("text", [
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'user_admin="hunter2-secret""x";',
    'org.apache.kafka.common.security.plain.PlainLoginModule hunter2-secret '
    'user_admin="x";',
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'user_admin "hunter2-secret";',
])
def test_jaas_config_errors_say_where_without_echoing_the_config(text: str) -> None:
    with pytest.raises(ValueError, match="JAAS") as caught:
        parse_jaas_config(text)
    assert "hunter2" not in str(caught.value)
    assert "character" in str(caught.value)
