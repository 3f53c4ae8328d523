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
