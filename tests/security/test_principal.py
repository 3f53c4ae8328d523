"""Principals from certificates: RFC 2253 names and ssl.principal.mapping.rules."""

from __future__ import annotations

import pytest

from odradek.security.principal import (
    NoMatchingRuleError,
    SslPrincipalMapper,
    parse_mapping_rules,
    rfc2253_name,
)


def test_rfc2253_reverses_rdns_and_escapes() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
               (("organizationalUnitName", "ops"), ("commonName", "#alice ")),
               (("emailAddress", "a@b.c"),))
    assert rfc2253_name(subject) == (
        "1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "")
        + ",OU=ops+CN=\\#alice\\ ,O=Acme\\, Inc,C=US")


# Kafka's SslPrincipalMapperTest cases.
RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
         "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
         "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
         "DEFAULT")


@pytest.mark.parametrize(("dn", "name"), [
    ("CN=kafka-server1,OU=ServiceUsers,O=org,C=US", "kafka-server1"),
    ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US", "duke@javasoft"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US,CN=duke", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_mapping_rules(dn: str, name: str) -> None:
    assert SslPrincipalMapper(RULES).name(dn) == name


def test_default_keeps_the_dn() -> None:
    assert SslPrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"


def test_no_matching_rule() -> None:
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=(.*),O=o$/$1/").name("CN=x")


@pytest.mark.parametrize("rules", [
    "DEFAULT,RULE:^CN=(.*)$/$1/LU", "RULE:^CN=(.*)$/$1", "NOT_A_RULE", "RULE:(/$1/",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        parse_mapping_rules(rules)


def test_rfc2253_from_der_prints_other_attributes_as_java_does() -> None:
    """Java's X500Principal.getName(): keywords decoded, any other attribute OID=#hex of
    its DER value, with the string type the certificate used (issue 47), so rules copied
    from a Kafka deployment match the same names."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from odradek.security.principal import rfc2253_name_der

    name = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                           "Acme, Inc")]),
        x509.RelativeDistinguishedName([
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, "1234")]),  # PrintableString
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.TITLE, "Ops")]),  # UTF8
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS,
                                                           "a@b.c")]),  # IA5String
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.DOMAIN_COMPONENT,
                                                           "example")]),
    ])
    assert rfc2253_name_der(name.public_bytes()) == (
        "DC=example,1.2.840.113549.1.9.1=#16056140622e63,2.5.4.12=#0c034f7073,"
        "2.5.4.5=#130431323334+CN=alice,O=Acme\\, Inc,C=DE")  # DER order


def test_certificate_dn_reads_the_subject_of_a_der_certificate() -> None:
    import trustme
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from odradek.security.principal import certificate_dn

    cert = trustme.CA().issue_cert("alice@example.com", common_name="alice")
    der = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(
        Encoding.DER)
    dn = certificate_dn(der)
    assert dn.startswith("CN=alice,OU=Testing cert #"), dn
    assert dn.rsplit(",", 1)[1].startswith("O=trustme v"), dn
