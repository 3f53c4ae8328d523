"""Principals: Kafka's ``KafkaPrincipal`` strings, and client certificates' names.

How it works: a TLS client's principal is Kafka's ``DefaultKafkaPrincipalBuilder`` one,
``User:`` + the name :class:`SslPrincipalMapper` makes of the certificate subject's
distinguished name in RFC 2253 form (Java's ``X500Principal.getName()``: the RDNs last
first, keywords CN, L, ST, O, OU, C, STREET, DC, UID, other attributes as a dotted OID
with the DER value in hex, ``,+"\\<>;`` escaped). :func:`rfc2253_name_der` makes it from
the certificate's own bytes, exactly (the string type of each value is in them);
:func:`rfc2253_name` from ``ssl``'s decoded subject, which has lost those types, knows
only the keywords and emailAddress.

``ssl.principal.mapping.rules`` follows Kafka's ``SslPrincipalMapper``: a comma-separated
list of ``DEFAULT`` (the DN as it is) and ``RULE:pattern/replacement/[LU]`` (the first
rule whose pattern matches the whole DN gives the name: its matches replaced by
``replacement``, with Java's ``$1`` group references, then lower- or upper-cased with L or
U). A DN no rule matches cannot be authenticated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANONYMOUS",
    "NoMatchingRuleError",
    "SslPrincipalMapper",
    "certificate_dn",
    "parse_mapping_rules",
    "rfc2253_name",
    "rfc2253_name_der",
    "user_principal",
]

ANONYMOUS: Final = "User:ANONYMOUS"

# OpenSSL's long names (what ssl.getpeercert() reports) -> Java's RFC 2253 keywords.
_KEYWORDS: Final = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
# Attributes Java prints as OID=#DER, with the DER string tag their values always have.
_OID_ATTRIBUTES: Final = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # IA5String


def user_principal(name: str) -> str:
    return f"User:{name}"


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (
                ch == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    oid = _OID_ATTRIBUTES.get(name)
    if oid is not None:
        raw = value.encode()
        der = bytes([oid[1]]) + _der_length(len(raw)) + raw
        return f"{oid[0]}=#{der.hex()}"
    return f"{name}={_escape(value)}"


# Java's RFC 2253 keywords by OID; any other attribute is printed as OID=#<DER hex>.
_KEYWORD_OIDS: Final = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string tags -> the codec of their bytes (DirectoryString and the like).
_STRING_CODECS: Final = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x1A: "ascii",
                         0x14: "latin-1", 0x1E: "utf-16-be", 0x1C: "utf-32-be"}


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``pos``."""
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[pos:pos + count], "big")
        pos += count
    if pos + length > len(der):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _oid(body: bytes) -> str:
    first, arcs, value = True, [], 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            if first:
                arcs += [min(value // 40, 2), value - 40 * min(value // 40, 2)]
                first = False
            else:
                arcs.append(value)
            value = 0
    return ".".join(map(str, arcs))


def rfc2253_name_der(name: bytes) -> str:
    """The RFC 2253 form of a DER-encoded Name (a certificate's subject) exactly as
    Java's ``X500Principal.getName()`` writes it: the keywords above with their decoded
    value escaped, every other attribute as its dotted OID and ``#`` with the hex of the
    value's DER encoding, whatever string type the certificate used."""
    _, pos, end = _tlv(name, 0)  # Name: SEQUENCE OF RelativeDistinguishedName
    rdns = []
    while pos < end:
        _, set_pos, set_end = _tlv(name, pos)  # RDN: SET OF AttributeTypeAndValue
        parts = []
        while set_pos < set_end:
            _, attr_pos, attr_end = _tlv(name, set_pos)
            _, oid_start, oid_end = _tlv(name, attr_pos)
            oid = _oid(name[oid_start:oid_end])
            tag, value_start, value_end = _tlv(name, oid_end)
            keyword, codec = _KEYWORD_OIDS.get(oid), _STRING_CODECS.get(tag)
            if keyword is not None and codec is not None:
                text = name[value_start:value_end].decode(codec, errors="replace")
                parts.append(f"{keyword}={_escape(text)}")
            else:
                parts.append(f"{oid}=#{name[oid_end:value_end].hex()}")
            set_pos = attr_end
        rdns.append("+".join(parts))
        pos = set_end
    return ",".join(reversed(rdns))


def certificate_dn(certificate: bytes) -> str:
    """The subject of a DER certificate (``SSLObject.getpeercert(binary_form=True)``) as
    Java's ``X500Principal.getName()`` writes it."""
    from cryptography import x509  # the TLS listeners' dependency, not every caller's

    return rfc2253_name_der(x509.load_der_x509_certificate(certificate).subject.public_bytes())


def rfc2253_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 form of a subject as ``ssl.SSLSocket.getpeercert()`` gives it (RDNs
    in certificate order, each a tuple of (long name, value) pairs)."""
    return ",".join("+".join(_attribute(n, v) for n, v in rdn) for rdn in reversed(subject))


class NoMatchingRuleError(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a distinguished name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{self.case}"


def _expand(replacement: str, m: re.Match[str]) -> str:
    """Java's ``Matcher.appendReplacement``: ``$n`` is group n, ``\\x`` is x."""
    out = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit() and int(
                    replacement[i + 1:j + 1]) <= (m.re.groups or 0):
                j += 1
            group = int(replacement[i + 1:j]) if j > i + 1 else int(replacement[i + 1])
            if group > (m.re.groups or 0):
                raise IndexError(f"no group {group} in {m.re.pattern!r}")
            out.append(m.group(group) or "")
            i = max(j, i + 2)
        else:
            out.append(ch)
            i += 1
    return "".join(out)


# Kafka's SslPrincipalMapper.RULE_PATTERN: DEFAULT, RULE:pattern/replacement/[LU], or
# something else (invalid).
_RULE: Final = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?)(?P<rest>[^,]*)|(?P<other>[^,]*))"
    r"\s*(?:,|$)"
)


def parse_mapping_rules(text: str) -> list[_Rule]:
    """``ssl.principal.mapping.rules`` -> rules; ValueError naming a rule that is not
    ``DEFAULT`` or ``RULE:pattern/replacement/[LU]``."""
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"Invalid rule: {text[pos:]}")
        pos = m.end()
        if m["default"]:
            rules.append(_Rule(None))
        elif m["pattern"] is not None:
            if m["rest"].strip():
                raise ValueError(f"Invalid rule: {m.group(0).strip(' ,')}")
            try:
                pattern = re.compile(m["pattern"])
            except re.error as exc:
                raise ValueError(f"Invalid rule: {m.group(0).strip(' ,')}: {exc}") from None
            rules.append(_Rule(pattern, m["replacement"], m["case"]))
        elif m["other"] and m["other"].strip():
            raise ValueError(f"Invalid rule: {m['other'].strip()}")
    return rules or [_Rule(None)]


class SslPrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: a distinguished name -> a principal name."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_mapping_rules(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            found = rule.apply(dn)
            if found is not None:
                return found
        raise NoMatchingRuleError(
            f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")
