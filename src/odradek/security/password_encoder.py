"""Dynamic password configs encrypted with the broker's secret (Kafka's PasswordEncoder).

How it works, as Kafka's ``EncryptingPasswordEncoder`` (server-common; KIP-226): a
password config set dynamically (``listener.name.ssl.ssl.keystore.password`` …) is stored
encrypted with a key derived from ``password.encoder.secret``. Each encoding draws a fresh
256-byte salt and derives the key with PBKDF2 (``password.encoder.keyfactory.algorithm``,
PBKDF2WithHmacSHA512 by default as Kafka's when the JVM offers it, else
PBKDF2WithHmacSHA1; ``password.encoder.iterations`` rounds; ``password.encoder.key.length``
bits), then encrypts the UTF-8 password with ``password.encoder.cipher.algorithm``
(AES/CBC/PKCS5Padding with a random 16-byte IV, or AES/GCM/NoPadding with a random 12-byte
IV and a 128-bit tag). The stored text is Kafka's: ``name:value`` pairs joined by commas,
binary values in standard base64::

    encryptedPassword:…,passwordLength:12,salt:…,initializationVector:…,
    keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,
    keyLength:128,iterations:4096

(GCM adds ``authenticationTagLength``). Decoding reads every parameter from the text, so a
value stays readable after the algorithms are changed; only the secret must be the same.
``passwordLength`` counts UTF-16 code units (Java's ``String.length``) and is checked after
decryption, as Kafka's sanity check. A wrong secret, a damaged value or one that is not an
encoded password is a :class:`PasswordEncoderError` with a message that never holds the
value, the password or the secret.

Sans-I/O: no file, no store; randomness comes from ``random_bytes`` (``os.urandom``).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

__all__ = [
    "AES_KEY_LENGTHS", "CIPHER_ALGORITHMS", "DEFAULT_CIPHER_ALGORITHM", "DEFAULT_ITERATIONS",
    "DEFAULT_KEY_LENGTH", "KEY_FACTORY_ALGORITHMS", "MAX_ITERATIONS", "MIN_ITERATIONS",
    "PasswordEncoder", "PasswordEncoderError", "is_encoded", "parse_encoded",
]

# The names of Kafka's encoded form (PasswordEncoder's constants, GcmParamsEncoder's).
ENCRYPTED_PASSWORD: Final = "encryptedPassword"
PASSWORD_LENGTH: Final = "passwordLength"
SALT: Final = "salt"
INITIALIZATION_VECTOR: Final = "initializationVector"
AUTHENTICATION_TAG_LENGTH: Final = "authenticationTagLength"
KEY_FACTORY_ALGORITHM: Final = "keyFactoryAlgorithm"
CIPHER_ALGORITHM: Final = "cipherAlgorithm"
KEY_LENGTH: Final = "keyLength"
ITERATIONS: Final = "iterations"

# The JCA SecretKeyFactory names of PBKDF2 and their hash.
KEY_FACTORY_ALGORITHMS: Final[Mapping[str, Callable[[], hashes.HashAlgorithm]]] = {
    "PBKDF2WithHmacSHA512": hashes.SHA512,
    "PBKDF2WithHmacSHA384": hashes.SHA384,
    "PBKDF2WithHmacSHA256": hashes.SHA256,
    "PBKDF2WithHmacSHA224": hashes.SHA224,
    "PBKDF2WithHmacSHA1": hashes.SHA1,
}
# Kafka's choice when password.encoder.keyfactory.algorithm is not set: the first of these
# the JVM has (here always the first).
_DEFAULT_KEY_FACTORIES: Final = ("PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA1")
CBC: Final = "AES/CBC/PKCS5Padding"
GCM: Final = "AES/GCM/NoPadding"
CIPHER_ALGORITHMS: Final = (CBC, GCM)
DEFAULT_CIPHER_ALGORITHM: Final = CBC
DEFAULT_KEY_LENGTH: Final = 128
DEFAULT_ITERATIONS: Final = 4096
AES_KEY_LENGTHS: Final = (128, 192, 256)
MIN_ITERATIONS: Final = 1024  # Kafka's atLeast(1024)
# Bounds on what a stored value may ask of a decode (a damaged or hostile value must not
# make the broker spin): Kafka's defaults are far below both.
MAX_ITERATIONS: Final = 10_000_000
MAX_ENCODED_CHARS: Final = 64 * 1024 * 1024
SALT_BYTES: Final = 256  # Kafka's
CBC_IV_BYTES: Final = 16  # the AES block: what Java's Cipher.init draws for CBC
GCM_IV_BYTES: Final = 12  # Java's default GCM IV
GCM_TAG_BITS: Final = 128  # Java's default GCM tag


class PasswordEncoderError(Exception):
    """A password that cannot be encoded or decoded, or encoder settings that cannot work
    (the message never holds a password, a stored value or the secret)."""


def parse_encoded(text: str) -> dict[str, str]:
    """The ``name:value`` pairs of an encoded password (Kafka's ``Csv.parseCsvMap``)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        name, sep, value = item.rpartition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


def is_encoded(text: str) -> bool:
    """Whether ``text`` has the form of an encoded password (not whether it decodes)."""
    return ENCRYPTED_PASSWORD in parse_encoded(text) if ":" in text else False


def java_length(text: str) -> int:
    """Java's ``String.length()``: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def check_settings(key_factory_algorithm: str | None, cipher_algorithm: str,
                   key_length: int, iterations: int) -> None:
    """PasswordEncoderError naming the setting if the encoder could not work with these."""
    if key_factory_algorithm and key_factory_algorithm not in KEY_FACTORY_ALGORITHMS:
        raise PasswordEncoderError(
            f"password.encoder.keyfactory.algorithm {key_factory_algorithm} is not supported "
            f"(one of {', '.join(KEY_FACTORY_ALGORITHMS)})")
    if cipher_algorithm not in CIPHER_ALGORITHMS:
        raise PasswordEncoderError(
            f"password.encoder.cipher.algorithm {cipher_algorithm} is not supported "
            f"(one of {', '.join(CIPHER_ALGORITHMS)})")
    if key_length not in AES_KEY_LENGTHS:
        raise PasswordEncoderError(
            f"password.encoder.key.length {key_length} is not a key length of AES "
            f"({', '.join(map(str, AES_KEY_LENGTHS))})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise PasswordEncoderError(
            f"password.encoder.iterations must be between {MIN_ITERATIONS} and "
            f"{MAX_ITERATIONS}, not {iterations}")


@dataclass(frozen=True)
class PasswordEncoder:
    """Encodes and decodes dynamic password configs with one secret."""

    secret: str = field(repr=False)
    key_factory_algorithm: str | None = None
    cipher_algorithm: str = DEFAULT_CIPHER_ALGORITHM
    key_length: int = DEFAULT_KEY_LENGTH
    iterations: int = DEFAULT_ITERATIONS
    random_bytes: Callable[[int], bytes] = field(default=os.urandom, repr=False,
                                                 compare=False)

    def __post_init__(self) -> None:
        if not self.secret:
            raise PasswordEncoderError("password.encoder.secret is empty")
        check_settings(self.key_factory_algorithm, self.cipher_algorithm, self.key_length,
                       self.iterations)

    def encode(self, password: str) -> str:
        """Kafka's encoded form of ``password``, with a fresh salt and IV."""
        factory = self.key_factory_algorithm or next(
            a for a in _DEFAULT_KEY_FACTORIES if a in KEY_FACTORY_ALGORITHMS)
        salt = self.random_bytes(SALT_BYTES)
        key = self._key(factory, self.key_length, salt, self.iterations)
        plain = password.encode("utf-8")
        params: dict[str, str]
        if self.cipher_algorithm == GCM:
            iv = self.random_bytes(GCM_IV_BYTES)
            encryptor = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
            encrypted = encryptor.update(plain) + encryptor.finalize() + encryptor.tag
            params = {INITIALIZATION_VECTOR: _b64(iv),
                      AUTHENTICATION_TAG_LENGTH: str(GCM_TAG_BITS)}
        else:
            iv = self.random_bytes(CBC_IV_BYTES)
            padder = padding.PKCS7(algorithms.AES.block_size).padder()
            padded = padder.update(plain) + padder.finalize()
            cbc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = cbc.update(padded) + cbc.finalize()
            params = {INITIALIZATION_VECTOR: _b64(iv)}
        fields = {
            ENCRYPTED_PASSWORD: _b64(encrypted),
            PASSWORD_LENGTH: str(java_length(password)),
            SALT: _b64(salt),
            **params,
            KEY_FACTORY_ALGORITHM: factory,
            CIPHER_ALGORITHM: self.cipher_algorithm,
            KEY_LENGTH: str(self.key_length),
            ITERATIONS: str(self.iterations),
        }
        return ",".join(f"{name}:{value}" for name, value in fields.items())

    def decode(self, encoded: str) -> str:
        """The password of an encoded value; PasswordEncoderError if it is not one, or
        this secret does not open it."""
        if len(encoded) > MAX_ENCODED_CHARS:
            raise PasswordEncoderError("Password could not be decoded: the value is too long")
        params = parse_encoded(encoded)
        if ENCRYPTED_PASSWORD not in params:
            raise PasswordEncoderError(
                "Password could not be decoded: the value is not an encoded password")
        try:
            factory = params.get(KEY_FACTORY_ALGORITHM) or _DEFAULT_KEY_FACTORIES[0]
            cipher = params[CIPHER_ALGORITHM]
            key_length = int(params[KEY_LENGTH])
            iterations = int(params[ITERATIONS])
            salt = _unb64(params[SALT])
            encrypted = _unb64(params[ENCRYPTED_PASSWORD])
            length = int(params[PASSWORD_LENGTH])
            iv = _unb64(params[INITIALIZATION_VECTOR])
            tag_bits = int(params.get(AUTHENTICATION_TAG_LENGTH, GCM_TAG_BITS))
        except KeyError as exc:
            raise PasswordEncoderError(
                f"Password could not be decoded: {exc.args[0]} is missing") from None
        except (ValueError, binascii.Error):
            raise PasswordEncoderError(
                "Password could not be decoded: a parameter is malformed") from None
        try:
            check_settings(factory, cipher, key_length, iterations)
        except PasswordEncoderError as exc:
            raise PasswordEncoderError(f"Password could not be decoded: {exc}") from None
        key = self._key(factory, key_length, salt, iterations)
        try:
            if cipher == GCM:
                tag_bytes = tag_bits // 8
                if tag_bits % 8 or not 4 <= tag_bytes <= 16 or len(encrypted) < tag_bytes:
                    raise ValueError("bad tag")
                decryptor = Cipher(algorithms.AES(key), modes.GCM(
                    iv, encrypted[-tag_bytes:], min_tag_length=tag_bytes)).decryptor()
                plain = decryptor.update(encrypted[:-tag_bytes]) + decryptor.finalize()
            else:
                cbc = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                padded = cbc.update(encrypted) + cbc.finalize()
                unpadder = padding.PKCS7(algorithms.AES.block_size).unpadder()
                plain = unpadder.update(padded) + unpadder.finalize()
            password = plain.decode("utf-8")
        except (ValueError, InvalidTag):  # a wrong secret, or a damaged value
            raise PasswordEncoderError(
                "Password could not be decoded (a different password.encoder.secret, or a "
                "damaged value)") from None
        if java_length(password) != length:
            raise PasswordEncoderError(
                "Password could not be decoded, sanity check of length failed")
        return password

    def _key(self, factory: str, key_length: int, salt: bytes, iterations: int) -> bytes:
        """PBKDF2 of the secret (Java's PBEKeySpec: the UTF-8 bytes of its chars)."""
        kdf = PBKDF2HMAC(KEY_FACTORY_ALGORITHMS[factory](), key_length // 8, salt, iterations)
        return kdf.derive(self.secret.encode("utf-8", "surrogatepass"))

    @classmethod
    def from_config(cls, values: Mapping[str, Any], secret_key: str = "password.encoder.secret",
                    ) -> PasswordEncoder | None:
        """The encoder of a broker's ``password.encoder.*`` settings with the secret of
        ``secret_key`` (``password.encoder.old.secret`` for rotation); None when that secret
        is not set."""
        secret = str(values.get(secret_key) or "")
        if not secret:
            return None
        return cls(secret,
                   str(values.get("password.encoder.keyfactory.algorithm") or "") or None,
                   str(values.get("password.encoder.cipher.algorithm") or CBC),
                   int(values.get("password.encoder.key.length") or DEFAULT_KEY_LENGTH),
                   int(values.get("password.encoder.iterations") or DEFAULT_ITERATIONS))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
