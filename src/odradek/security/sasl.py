"""SASL mechanisms as sans-I/O state machines: PLAIN and SCRAM-SHA-256/512 (server side).

How it works: a mechanism machine takes the client's tokens and returns the server's,
raising :class:`SaslAuthenticationError` (Kafka's ``SaslAuthenticationException``: the
message the client is shown, never a password) when the client cannot be authenticated.
The network layer (``server/network/sasl.py``) carries the tokens in SaslAuthenticate
requests (or raw, after a SaslHandshake v0) and fetches what the machines ask for.

- :class:`PlainServer` follows RFC 4616 and Kafka's ``PlainSaslServer``: one message
  ``[authzid] NUL authcid NUL passwd``, checked against the listener's users
  (``user_<name>="<password>"`` options of ``PlainLoginModule`` in the JAAS config), the
  passwords compared in constant time.
- :class:`ScramServer` follows RFC 5802 and RFC 7677 as Kafka's ``ScramSaslServer``:
  client-first (``n,[a=authzid],n=user,r=nonce``), after which the caller looks up the
  user's stored credential and hands it to :meth:`ScramServer.server_first`
  (``r=nonce+server nonce,s=salt,i=iterations``); client-final
  (``c=binding,r=nonce,p=proof``; the nonce the server sent, or the client's nonce and it,
  which librdkafka before 2.6.1 sends and Kafka 3.9 accepts): the proof is checked
  against the stored key (``H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey``, compared with
  ``hmac.compare_digest``), and the answer is the server signature (``v=...``). No
  channel binding (``n`` or ``y`` only), as Kafka.
- :class:`ScramCredential` is Kafka's stored form (``ScramCredentialUtils``):
  ``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``, made from a
  password with ``hashlib.pbkdf2_hmac`` (:func:`make_scram_credential`).
- :func:`parse_jaas_config` reads Kafka's JAAS config syntax
  (``<LoginModule class> required key="value" ...;``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MECHANISMS",
    "SCRAM_MAX_ITERATIONS",
    "SCRAM_MECHANISMS",
    "SCRAM_MIN_ITERATIONS",
    "SCRAM_TYPES",
    "JaasModule",
    "PlainServer",
    "SaslAuthenticationError",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "credential_from_salted",
    "make_scram_credential",
    "parse_jaas_config",
    "plain_users",
]

SCRAM_MECHANISMS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's ScramMechanism type ids (the int8 of KIP-554's messages; 0 is UNKNOWN).
SCRAM_TYPES: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISMS: Final = ("PLAIN", *SCRAM_MECHANISMS)
# Kafka's ScramMechanism bounds (minIterations 4096; AlterUserScramCredentials' maximum).
SCRAM_MIN_ITERATIONS: Final = 4096
SCRAM_MAX_ITERATIONS: Final = 16384
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"


class SaslAuthenticationError(Exception):
    """The client cannot be authenticated; ``str()`` is what the client is told."""


def invalid_credentials(mechanism: str) -> SaslAuthenticationError:
    """Kafka's message for bad SCRAM credentials (an unknown user or a wrong password
    alike: the answer does not tell which)."""
    return SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}")


# -- PLAIN ---------------------------------------------------------------------------------
class PlainServer:
    """RFC 4616 PLAIN, one step (Kafka's ``PlainSaslServer``)."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        """Check the client's one message; the (empty) answer, or SaslAuthenticationError."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compared in constant time, against a dummy for an unknown user (same cost)
        ok = hmac.compare_digest((expected or "\0unknown").encode(), password.encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        self.username = username
        self.complete = True
        return b""


# -- SCRAM ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's stored SCRAM credential (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Parse the stored form; ValueError if it is not one."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def make_scram_credential(
    mechanism: str, password: str, iterations: int = SCRAM_MIN_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """The stored credential for ``password`` (Kafka's ``ScramFormatter``)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from a salted password (what AlterUserScramCredentials
    carries: the client salts and hashes, the broker derives the keys)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    client_key = _hmac(hash_name, salted, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


_CLIENT_FIRST: Final = re.compile(
    r"^(?P<gs2>[ny],(?:a=(?P<authzid>[^,]*))?,)(?P<bare>n=(?P<user>[^,]*),r=(?P<nonce>[^,]+)"
    r"(?P<ext>(?:,[^,]*)*))$")
_CLIENT_FINAL: Final = re.compile(
    r"^(?P<without_proof>c=(?P<binding>[^,]*),r=(?P<nonce>[^,]*)(?:,[^,]*)*?),p=(?P<proof>[^,]*)$")


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma, ``=3D`` an equals sign."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationError(f"Invalid SCRAM user name (bad escape): {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802 / RFC 7677 SCRAM, server side (Kafka's ``ScramSaslServer``).

    Steps: :meth:`client_first` (the user to look up), :meth:`server_first` (with that
    user's credential, None if there is none), :meth:`client_final` (the proof checked;
    the server-final message)."""

    def __init__(self, mechanism: str, nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self.complete = False
        self.username = ""
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._client_nonce = ""
        self._full_nonce = ""
        self._credential: ScramCredential | None = None

    def client_first(self, token: bytes) -> str:
        """Parse client-first; the user name to look up."""
        if self._client_first_bare:
            raise SaslAuthenticationError("Unexpected SCRAM message: client-first again")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM client first message") from None
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        extensions = [e for e in m["ext"].split(",") if e]
        if any(e.startswith("tokenauth=") for e in extensions):
            raise SaslAuthenticationError(
                "Authentication failed: delegation tokens are not supported by Odradek")
        username = _sasl_name(m["user"])
        authzid = m["authzid"]
        if authzid and _sasl_name(authzid) != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        self._gs2 = m["gs2"]
        self._client_first_bare = m["bare"]
        self._client_nonce = m["nonce"]
        self._full_nonce = m["nonce"] + self._nonce()
        self.username = username
        return username

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server-first message for the user's ``credential`` (None: no such user,
        which fails as a wrong password does, as does a stored iteration count outside
        the mechanism's bounds)."""
        if credential is None or not (
                SCRAM_MIN_ITERATIONS <= credential.iterations <= SCRAM_MAX_ITERATIONS):
            # Kafka's ScramSaslServer re-checks the stored count at every login
            raise invalid_credentials(self.mechanism)
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, token: bytes) -> bytes:
        """Check client-final's proof; the server-final message (``v=signature``)."""
        credential = self._credential
        if credential is None:
            raise SaslAuthenticationError("Unexpected SCRAM message: client-final first")
        try:
            m = _CLIENT_FINAL.match(token.decode("utf-8"))
        except UnicodeDecodeError:
            m = None
        if m is None:
            raise SaslAuthenticationError("Invalid SCRAM client final message")
        # librdkafka before 2.6.1 sends the client nonce twice (client + server nonce, the
        # latter already starting with it); Kafka 3.9 accepts it (its check is endsWith),
        # and so does this one, in exactly that form.
        if m["nonce"] not in (self._full_nonce, self._client_nonce + self._full_nonce):
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce mismatch")
        if m["binding"] != base64.b64encode(self._gs2.encode()).decode():
            raise SaslAuthenticationError(
                "Invalid SCRAM client final message: channel binding mismatch")
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except ValueError:
            raise invalid_credentials(self.mechanism) from None
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, m["without_proof"])).encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise invalid_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise invalid_credentials(self.mechanism)
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """RFC 5802 SCRAM, client side (Odradek's own client: the CLI, brokers on the
    inter-broker listener): :meth:`client_first`, :meth:`client_final` (from the
    server-first message), :meth:`verify_server_final`."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = (nonce or (lambda: secrets.token_urlsafe(24)))()
        self._bare = ""
        self._auth_message = b""
        self._server_key = b""

    def client_first(self) -> bytes:
        self._bare = f"n={self._username},r={self._nonce}"
        return f"n,,{self._bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        nonce, salt_b64, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslAuthenticationError("SCRAM: the server's nonce does not extend ours")
        if iterations is None or not iterations.isdigit():
            raise SaslAuthenticationError("SCRAM: no iteration count in the server's message")
        if int(iterations) < SCRAM_MIN_ITERATIONS:
            raise SaslAuthenticationError(f"SCRAM: {iterations} iterations is too few")
        salt = base64.b64decode(salt_b64)
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt,
                                     int(iterations))
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        self._server_key = _hmac(self._hash, salted, b"Server Key")
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = ",".join((self._bare, text, without_proof)).encode()
        signature = _hmac(self._hash, stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(
            _hmac(self._hash, self._server_key, self._auth_message))
        if not hmac.compare_digest(expected, server_final.strip()):
            raise SaslAuthenticationError("SCRAM: the server's signature does not match")


# -- JAAS configs --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JaasModule:
    """One login module entry of a JAAS config."""

    login_module: str
    flag: str
    options: Mapping[str, str]


_JAAS_TOKEN: Final = re.compile(
    r'\s*(?:(?P<quoted>"(?:\\.|[^"\\])*")|(?P<eq>=)|(?P<semi>;)|(?P<word>[^\s=;"]+))')
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(text: str) -> list[JaasModule]:
    """Kafka's ``sasl.jaas.config`` syntax (``JaasConfig``): ``<class> <flag> [key=value
    ...];``, one or more; values quoted or bare. ValueError when it is not that, saying at
    which character, never quoting the text (it holds passwords)."""
    tokens: list[tuple[str, str, int]] = []  # kind, value, where it starts
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"invalid JAAS config at character {pos + 1}: an unclosed "
                             "quote or a stray character")
        pos = m.end()
        kind = m.lastgroup or ""
        value = m[kind]
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        tokens.append((kind, value, m.start(kind) + 1))

    def error(i: int, what: str) -> ValueError:
        where = tokens[i][2] if i < len(tokens) else len(text) + 1
        return ValueError(f"invalid JAAS config at character {where}: {what}")

    modules: list[JaasModule] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise error(i, "expected '<LoginModule> <flag> ...;'")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise error(i + 1, f"the login module control flag is not one of "
                               f"{', '.join(_FLAGS)}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != "semi":
            if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "eq"
                    or tokens[i + 2][0] not in ("quoted", "word")):
                raise error(i, "expected key=value options")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise error(i, "the login module entry must end with ';'")
        i += 1
        modules.append(JaasModule(module, flag, options))
    if not modules:
        raise ValueError("invalid JAAS config: no login module")
    return modules


def plain_users(text: str) -> dict[str, str]:
    """The users (``user_<name>="<password>"``) of the PlainLoginModule in a JAAS config."""
    users: dict[str, str] = {}
    for module in parse_jaas_config(text):
        if module.login_module == PLAIN_LOGIN_MODULE:
            users.update({k[5:]: v for k, v in module.options.items() if k.startswith("user_")})
    return users
