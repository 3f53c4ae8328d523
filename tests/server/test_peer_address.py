"""The peer's address as Kafka sees it (issue 47, item 2): normalised once, at accept, to
what Java's ``InetAddress.getHostAddress()`` writes, so that host ACLs and
``max.connections.per.ip.overrides`` copied from Kafka match on a dual-stack listener
(``listeners=PLAINTEXT://:port`` binds ``::`` and takes IPv4 as IPv4-mapped addresses)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic

from odradek.protocol.errors import ErrorCode
from odradek.server.connection_quotas import ConnectionLimits, ConnectionQuotas, host_address
from odradek.testing import RunningBroker, running_broker
from tests.protocol.wire import decode_response, request_frame
from tests.server.test_authorization import call

IPV6 = socket.has_ipv6 and socket.has_dualstack_ipv6()
pytestmark = pytest.mark.skipif(not IPV6, reason="no dual-stack IPv6 on this machine")

ADMIN = "User:admin"
ANONYMOUS = "User:ANONYMOUS"
TOPIC_T, LITERAL, ALL, READ, DESCRIBE, DENY, ALLOW = 2, 3, 2, 3, 8, 2, 3


@pytest.mark.parametrize(("raw", "scope", "java"), [
    ("127.0.0.1", 0, "127.0.0.1"),
    ("::ffff:10.0.0.7", 0, "10.0.0.7"),  # IPv4-mapped: an Inet4Address in Java
    ("::1", 0, "0:0:0:0:0:0:0:1"),
    ("2001:db8::a0", 0, "2001:db8:0:0:0:0:0:a0"),
    ("2001:0DB8:0000::0001", 0, "2001:db8:0:0:0:0:0:1"),
    ("fe80::1%eth0", 2, "fe80:0:0:0:0:0:0:1%2"),  # an accepted socket's numeric scope id
    ("fe80::1%7", 0, "fe80:0:0:0:0:0:0:1%7"),
    ("broker-1.example", 0, "broker-1.example"),  # not an address: as it is
])
def test_host_address_is_javas(raw: str, scope: int, java: str) -> None:
    assert host_address(raw, scope) == java


def test_overrides_match_however_the_address_is_written() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections_per_ip_overrides={
        "10.0.0.7": 0, "::1": 1}))
    assert quotas.inc("10.0.0.7") == 0
    assert quotas.inc(host_address("::ffff:10.0.0.7")) == 0
    assert quotas.inc("0:0:0:0:0:0:0:1") is None
    assert quotas.inc(host_address("::1")) == 1


# -- over real sockets, on a dual-stack listener --------------------------------------------
def _connect(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect((host, port))
    return sock


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data[4:]


def _topic_error(host: str, port: int, topic: str) -> int:
    with _connect(host, port) as sock:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(name=topic),),  # type: ignore[arg-type]
            allow_auto_topic_creation=False)
        sock.sendall(request_frame(request, 1))
        payload = _read_frame(sock)
        assert payload is not None, "closed"
        return int(decode_response(payload, 3, 4)[1].topics[0].error_code)


def _acl(topic: str, host: str, permission: int) -> create_acls_v3.AclCreation:
    return create_acls_v3.AclCreation(
        resource_type=TOPIC_T, resource_name=topic,  # type: ignore[arg-type]
        resource_pattern_type=LITERAL, principal=ANONYMOUS, host=host,  # type: ignore[arg-type]
        operation=ALL if permission == ALLOW else DESCRIBE,  # type: ignore[arg-type]
        permission_type=permission)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def dual_stack() -> Iterator[RunningBroker]:
    with running_broker(overrides={
        "listeners": "PLAINTEXT://:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": ADMIN,
    }) as broker:
        yield broker


@pytest.mark.parametrize(("client", "acl_host"), [
    ("127.0.0.1", "127.0.0.1"),
    ("::1", "0:0:0:0:0:0:0:1"),  # as a Kafka ACL names ::1
])
def test_a_host_acl_holds_on_a_dual_stack_listener(
    dual_stack: RunningBroker, client: str, acl_host: str,
) -> None:
    broker = dual_stack
    topic = f"hosts-{client.replace(':', '').replace('.', '')}"
    broker.call(broker.broker.metadata.create_topic, topic, 1, 1)
    port = broker.broker.servers[0].port
    _, codes = call(broker, create_acls_v3.CreateAclsRequest(
        creations=(_acl(topic, "*", ALLOW),)), ADMIN)
    assert codes == {ErrorCode.none}
    assert _topic_error(client, port, topic) == ErrorCode.none  # allowed from anywhere
    _, codes = call(broker, create_acls_v3.CreateAclsRequest(
        creations=(_acl(topic, acl_host, DENY),)), ADMIN)
    assert codes == {ErrorCode.none}
    assert _topic_error(client, port, topic) == ErrorCode.topic_authorization_failed
    hosts = {c.peer[0] for c in broker.broker.servers[0].connections}
    assert not hosts or hosts <= {"127.0.0.1", "0:0:0:0:0:0:0:1"}


@pytest.mark.parametrize(("client", "override"), [
    ("127.0.0.1", "127.0.0.1:0"),
    ("::1", "[::1]:0"),
    ("::1", "0:0:0:0:0:0:0:1:0"),
])
def test_a_per_ip_override_holds_on_a_dual_stack_listener(client: str, override: str) -> None:
    with running_broker(overrides={"listeners": "PLAINTEXT://:0",
                                   "max.connections.per.ip.overrides": override}) as broker:
        port = broker.broker.servers[0].port
        other = "::1" if client == "127.0.0.1" else "127.0.0.1"
        assert _topic_error(other, port, "none") == ErrorCode.unknown_topic_or_partition
        with _connect(client, port) as sock:
            sock.sendall(request_frame(MetadataRequest(topics=None,
                                                       allow_auto_topic_creation=False), 1))
            assert _read_frame(sock) is None  # closed at once: the override is 0
