"""Admin and data operations over one :class:`BrokerConnection`, for the CLI tools.

Each call builds the kio request at a fixed, widely served version, sends it and turns a
non-zero error code into :class:`ClientError` naming the Kafka error.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from odradek.client.connection import BrokerConnection, ClientError, request_class
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.sasl import SCRAM_MECHANISMS, SCRAM_TYPES

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


def check(code: Any, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        detail = f": {message}" if message else ""
        raise ClientError(
            f"{what} failed with {ErrorCode(code).name.upper()}{detail}", int(ErrorCode(code).value)
        )


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]
    error: str


class FetchedPartition(NamedTuple):
    """One partition of a Fetch answer."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted_transactions: list[tuple[int, int]]  # (producer id, first offset)
    records: bytes


class Admin:
    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn

    async def metadata(
        self, topics: list[str] | None = None, auto_create: bool = False
    ) -> list[TopicDescription]:
        _, described = await self.cluster_metadata(topics, auto_create)
        return described

    async def cluster_metadata(
        self, topics: list[str] | None = None, auto_create: bool = False
    ) -> tuple[dict[int, tuple[str, int]], list[TopicDescription]]:
        """Metadata: every live broker (id -> (host, port)) and the topics asked for
        (None: every topic)."""
        cls = request_class("metadata", 12, "MetadataRequest")
        topic_cls = request_class("metadata", 12, "MetadataRequestTopic")
        request = cls(
            topics=None if topics is None else tuple(
                topic_cls(topic_id=None, name=t) for t in topics
            ),
            allow_auto_topic_creation=auto_create,
            include_topic_authorized_operations=False,
        )
        response = await self.conn.send(request)
        out = []
        for t in response.topics:
            out.append(TopicDescription(
                t.name, t.topic_id, t.is_internal,
                tuple(PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                                    tuple(p.isr_nodes), ErrorCode(p.error_code).name)
                      for p in sorted(t.partitions, key=lambda p: p.partition_index)),
                ErrorCode(t.error_code).name,
            ))
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        return brokers, out

    async def brokers(self) -> dict[int, tuple[str, int]]:
        """Every live broker: id -> (host, port)."""
        cls = request_class("metadata", 12, "MetadataRequest")
        response = await self.conn.send(cls(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ))
        return {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}

    async def leader(self, topic: str, partition: int) -> tuple[str, int]:
        """(host, port) of the leader of ``topic-partition``."""
        cls = request_class("metadata", 12, "MetadataRequest")
        topic_cls = request_class("metadata", 12, "MetadataRequestTopic")
        response = await self.conn.send(cls(
            topics=(topic_cls(topic_id=None, name=topic),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ))
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        what = f"finding the leader of {topic}-{partition}"
        for t in response.topics:
            if t.name != topic:
                continue
            check(t.error_code, what)
            for p in t.partitions:
                if p.partition_index == partition:
                    check(p.error_code, what)
                    if int(p.leader_id) not in brokers:
                        check(ErrorCode.leader_not_available, what)
                    return brokers[int(p.leader_id)]
        check(ErrorCode.unknown_topic_or_partition, what)
        raise AssertionError("unreachable")

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        cls = request_class("create_topics", 5, "CreateTopicsRequest")
        topic_cls = request_class("create_topics", 5, "CreatableTopic")
        config_cls = request_class("create_topics", 5, "CreatableTopicConfig")
        request = cls(
            topics=(topic_cls(name=name, num_partitions=partitions,
                              replication_factor=replication_factor, assignments=(),
                              configs=tuple(config_cls(name=k, value=v)
                                            for k, v in configs.items())),),
            timeout=datetime.timedelta(seconds=30), validate_only=False,
        )
        response = await self.conn.send(request)
        result = response.topics[0]
        check(result.error_code, f"creating topic {name}", result.error_message)

    async def delete_topic(self, name: str) -> None:
        cls = request_class("delete_topics", 4, "DeleteTopicsRequest")
        response = await self.conn.send(
            cls(topic_names=(name,), timeout=datetime.timedelta(seconds=30))
        )
        check(response.responses[0].error_code, f"deleting topic {name}")

    async def create_partitions(self, name: str, count: int) -> None:
        version = self.conn.version(37, (0, 3))
        cls = request_class("create_partitions", version, "CreatePartitionsRequest")
        topic_cls = request_class("create_partitions", version, "CreatePartitionsTopic")
        response = await self.conn.send(cls(
            topics=(topic_cls(name=name, count=count, assignments=None),),
            timeout=datetime.timedelta(seconds=30), validate_only=False,
        ))
        result = response.results[0]
        check(result.error_code, f"adding partitions to {name}", result.error_message)

    async def describe_topic_configs(self, name: str) -> list[tuple[str, str | None, bool]]:
        version = self.conn.version(32, (1, 4))
        cls = request_class("describe_configs", version, "DescribeConfigsRequest")
        res_cls = request_class("describe_configs", version, "DescribeConfigsResource")
        response = await self.conn.send(cls(
            resources=(res_cls(resource_type=2, resource_name=name, configuration_keys=None),),
            include_synonyms=False,
        ))
        result = response.results[0]
        check(result.error_code, f"describing configs of {name}", result.error_message)
        return [(c.name, c.value, getattr(c, "config_source", 5) == 1)
                for c in result.configs]

    async def alter_topic_configs(
        self, name: str, set_: dict[str, str], delete: list[str]
    ) -> None:
        await self.alter_configs(TOPIC_RESOURCE, name, set_, delete)

    async def alter_configs(
        self, resource_type: int, name: str, set_: dict[str, str], delete: list[str]
    ) -> None:
        """IncrementalAlterConfigs SET and DELETE on one resource (2: topic, 4: broker)."""
        version = self.conn.version(44, (0, 1))
        cls = request_class("incremental_alter_configs", version,
                            "IncrementalAlterConfigsRequest")
        res_cls = request_class("incremental_alter_configs", version, "AlterConfigsResource")
        cfg_cls = request_class("incremental_alter_configs", version, "AlterableConfig")
        configs = [cfg_cls(name=k, config_operation=0, value=v) for k, v in set_.items()]
        configs += [cfg_cls(name=k, config_operation=1, value=None) for k in delete]
        response = await self.conn.send(cls(
            resources=(res_cls(resource_type=resource_type, resource_name=name,
                               configs=tuple(configs)),),
            validate_only=False,
        ))
        result = response.responses[0]
        check(result.error_code, f"altering configs of {name}", result.error_message)

    async def describe_configs(
        self, resource_type: int, name: str
    ) -> list[tuple[str, str | None, int, bool]]:
        """(name, value, config source, sensitive) of every config of one resource."""
        version = self.conn.version(32, (1, 4))
        cls = request_class("describe_configs", version, "DescribeConfigsRequest")
        res_cls = request_class("describe_configs", version, "DescribeConfigsResource")
        response = await self.conn.send(cls(
            resources=(res_cls(resource_type=resource_type, resource_name=name,
                               configuration_keys=None),),
            include_synonyms=False,
        ))
        result = response.results[0]
        check(result.error_code, f"describing configs of {name}", result.error_message)
        return [(c.name, c.value, int(getattr(c, "config_source", 5)), bool(c.is_sensitive))
                for c in result.configs]

    async def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str | None]] = (), strict: bool = False,
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas (KIP-546): the entities passing the filter ``components``
        ((entity type, match type 0 exact / 1 default / 2 any, name to match); none:
        every entity), each as ({entity type: name or None for the default}, quotas)."""
        version = self.conn.version(48, (0, 1))
        cls = request_class("describe_client_quotas", version, "DescribeClientQuotasRequest")
        comp_cls = request_class("describe_client_quotas", version, "ComponentData")
        response = await self.conn.send(cls(
            components=tuple(comp_cls(entity_type=t, match_type=m, match=n)
                             for t, m, n in components),
            strict=strict,
        ))
        check(response.error_code, "describing client quotas", response.error_message)
        return [
            ({e.entity_type: e.entity_name for e in entry.entity},
             {v.key: float(v.value) for v in entry.values})
            for entry in response.entries or ()
        ]

    async def alter_client_quotas(
        self, entity: Sequence[tuple[str, str | None]], set_: dict[str, float],
        delete: list[str],
    ) -> None:
        """AlterClientQuotas (KIP-546) of one entity: its components (entity type, name or
        None: the default), e.g. ``[("user", "alice"), ("client-id", None)]``."""
        version = self.conn.version(49, (0, 1))
        cls = request_class("alter_client_quotas", version, "AlterClientQuotasRequest")
        entry_cls = request_class("alter_client_quotas", version, "EntryData")
        entity_cls = request_class("alter_client_quotas", version, "EntityData")
        op_cls = request_class("alter_client_quotas", version, "OpData")
        ops = [op_cls(key=k, value=v, remove=False) for k, v in set_.items()]
        ops += [op_cls(key=k, value=0.0, remove=True) for k in delete]
        response = await self.conn.send(cls(
            entries=(entry_cls(entity=tuple(entity_cls(entity_type=t, entity_name=n)
                                            for t, n in entity),
                               ops=tuple(ops)),),
            validate_only=False,
        ))
        result = response.entries[0]
        shown = ", ".join(f"{t} {n if n is not None else '<default>'}" for t, n in entity)
        check(result.error_code, f"altering quotas of {shown}", result.error_message)

    async def alter_user_scram_credentials(
        self, upsertions: list[tuple[str, str, int, str]], deletions: list[tuple[str, str]]
    ) -> None:
        """AlterUserScramCredentials (KIP-554): upsertions (user, mechanism, iterations,
        password) are salted and hashed here, so the password never leaves the client;
        deletions (user, mechanism). Raises ClientError on the first user that failed."""
        cls = request_class("alter_user_scram_credentials", 0,
                            "AlterUserScramCredentialsRequest")
        up_cls = request_class("alter_user_scram_credentials", 0, "ScramCredentialUpsertion")
        del_cls = request_class("alter_user_scram_credentials", 0, "ScramCredentialDeletion")
        ups = []
        for user, mechanism, iterations, password in upsertions:
            salt = secrets.token_bytes(32)
            salted = hashlib.pbkdf2_hmac(SCRAM_MECHANISMS[mechanism], password.encode(), salt,
                                         iterations)
            ups.append(up_cls(name=user, mechanism=i8(SCRAM_TYPES[mechanism]),
                              iterations=i32(iterations), salt=salt, salted_password=salted))
        dels = tuple(del_cls(name=user, mechanism=i8(SCRAM_TYPES.get(mechanism, 0)))
                     for user, mechanism in deletions)
        response = await self.conn.send(cls(deletions=dels, upsertions=tuple(ups)))
        for result in response.results:
            check(result.error_code, f"altering SCRAM credentials of user {result.user}",
                  result.error_message)

    async def describe_user_scram_credentials(
        self, users: list[str] | None
    ) -> dict[str, dict[str, int]]:
        """DescribeUserScramCredentials (KIP-554): user -> {mechanism: iterations} (every
        user with credentials when ``users`` is None)."""
        cls = request_class("describe_user_scram_credentials", 0,
                            "DescribeUserScramCredentialsRequest")
        name_cls = request_class("describe_user_scram_credentials", 0, "UserName")
        response = await self.conn.send(cls(
            users=None if users is None else tuple(name_cls(name=u) for u in users)))
        check(response.error_code, "describing SCRAM credentials", response.error_message)
        names = {t: n for n, t in SCRAM_TYPES.items()}
        out: dict[str, dict[str, int]] = {}
        for result in response.results:
            check(result.error_code, f"describing SCRAM credentials of user {result.user}",
                  result.error_message)
            out[result.user] = {names.get(int(c.mechanism), str(c.mechanism)): int(c.iterations)
                                for c in result.credential_infos}
        return out

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        cls = request_class("list_offsets", 7, "ListOffsetsRequest")
        topic_cls = request_class("list_offsets", 7, "ListOffsetsTopic")
        part_cls = request_class("list_offsets", 7, "ListOffsetsPartition")
        response = await self.conn.send(cls(
            replica_id=-1, isolation_level=0,
            topics=(topic_cls(name=topic, partitions=(
                part_cls(partition_index=partition, current_leader_epoch=-1,
                         timestamp=timestamp),)),),
        ))
        p = response.topics[0].partitions[0]
        check(p.error_code, f"listing offsets of {topic}-{partition}")
        return int(p.offset), int(p.timestamp)

    async def produce(
        self, topic: str, partition: int, records: bytes, acks: int = -1
    ) -> int:
        cls = request_class("produce", 9, "ProduceRequest")
        topic_cls = request_class("produce", 9, "TopicProduceData")
        part_cls = request_class("produce", 9, "PartitionProduceData")
        request = cls(
            transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=30),
            topic_data=(topic_cls(name=topic, partition_data=(
                part_cls(index=partition, records=records),)),),
        )
        response = await self.conn.send(request, expect_response=acks != 0)
        if acks == 0:
            return -1
        p = response.responses[0].partition_responses[0]
        check(p.error_code, f"producing to {topic}-{partition}", p.error_message)
        return int(p.base_offset)

    async def fetch(
        self, topic: str, partitions: dict[int, int], max_wait_ms: int = 500,
        max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
    ) -> dict[int, tuple[int, int, bytes]]:
        """{partition: (error code, high watermark, records)} from the given offsets."""
        out = await self.fetch_partitions(topic, partitions, max_wait_ms, max_bytes,
                                          partition_max_bytes)
        return {p: (f.error_code, f.high_watermark, f.records) for p, f in out.items()}

    async def fetch_partitions(
        self, topic: str, partitions: dict[int, int], max_wait_ms: int = 500,
        max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
        isolation_level: int = 0,
    ) -> dict[int, FetchedPartition]:
        """Each partition's answer from the given offsets; under ``isolation_level=1``
        (read_committed) the records end at the last stable offset and the answer names
        the aborted transactions they may hold."""
        cls = request_class("fetch", 12, "FetchRequest")
        topic_cls = request_class("fetch", 12, "FetchTopic")
        part_cls = request_class("fetch", 12, "FetchPartition")
        request = cls(
            max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
            max_bytes=max_bytes, isolation_level=isolation_level, session_id=0,
            session_epoch=-1,
            topics=(topic_cls(topic=topic, partitions=tuple(
                part_cls(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
                for p, o in partitions.items())),),
            forgotten_topics_data=(), rack_id="",
        )
        response = await self.conn.send(request)
        check(response.error_code, f"fetching {topic}")
        out: dict[int, FetchedPartition] = {}
        for t in response.responses:
            for p in t.partitions:
                out[p.partition_index] = FetchedPartition(
                    int(ErrorCode(p.error_code).value), int(p.high_watermark),
                    int(p.last_stable_offset),
                    [(int(a.producer_id), int(a.first_offset))
                     for a in p.aborted_transactions or ()],
                    bytes(p.records or b""),
                )
        return out

    async def controller(self) -> tuple[int, str, int]:
        """(id, host, port) of the controller the broker knows (ClientError if none)."""
        cls = request_class("metadata", 12, "MetadataRequest")
        response = await self.conn.send(cls(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ))
        for b in response.brokers:
            if int(b.node_id) == int(response.controller_id):
                return int(b.node_id), b.host, int(b.port)
        raise ClientError("no controller is known to the cluster yet",
                          int(ErrorCode.not_controller.value))

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None,
        timeout: datetime.timedelta = datetime.timedelta(seconds=60),
    ) -> tuple[int, list[tuple[str, int, int, str | None]]]:
        """ElectLeaders (v1+: ``election_type`` 0 preferred, 1 unclean; None: every
        partition): (top-level error code, [(topic, partition, error code, message)])."""
        version = self.conn.version(43, (1, 2))
        cls = request_class("elect_leaders", version, "ElectLeadersRequest")
        topic_cls = request_class("elect_leaders", version, "TopicPartitions")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or []:
            by_topic.setdefault(topic, []).append(partition)
        response = await self.conn.send(cls(
            election_type=election_type,
            topic_partitions=None if partitions is None else tuple(
                topic_cls(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            timeout=timeout,
        ))
        return int(ErrorCode(response.error_code).value), [
            (r.topic, int(p.partition_id), int(ErrorCode(p.error_code).value), p.error_message)
            for r in response.replica_election_results for p in r.partition_result
        ]

    # -- ACLs (CreateAcls / DescribeAcls / DeleteAcls at v1-3, which have pattern types) ------
    async def create_acls(self, bindings: list[AclBinding]) -> None:
        version = self.conn.version(30, (1, 3))
        cls = request_class("create_acls", version, "CreateAclsRequest")
        creation_cls = request_class("create_acls", version, "AclCreation")
        response = await self.conn.send(cls(creations=tuple(
            creation_cls(resource_type=b.pattern.resource_type.value,
                         resource_name=b.pattern.name,
                         resource_pattern_type=b.pattern.pattern_type.value,
                         principal=b.entry.principal, host=b.entry.host,
                         operation=b.entry.operation.value,
                         permission_type=b.entry.permission.value)
            for b in bindings)))
        for binding, result in zip(bindings, response.results, strict=True):
            check(result.error_code, f"adding {binding}", result.error_message)

    async def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        version = self.conn.version(29, (1, 3))
        cls = request_class("describe_acls", version, "DescribeAclsRequest")
        response = await self.conn.send(cls(
            resource_type_filter=flt.resource_type.value, resource_name_filter=flt.name,
            pattern_type_filter=flt.pattern_type.value, principal_filter=flt.principal,
            host_filter=flt.host, operation=flt.operation.value,
            permission_type=flt.permission.value))
        check(response.error_code, "listing ACLs", response.error_message)
        return [
            AclBinding(ResourcePattern(ResourceType(r.resource_type), r.resource_name,
                                       PatternType(r.pattern_type)),
                       AclEntry(a.principal, a.host, AclOperation(a.operation),
                                AclPermissionType(a.permission_type)))
            for r in response.resources for a in r.acls
        ]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        """Remove every ACL matching one of ``filters``; returns those removed."""
        version = self.conn.version(31, (1, 3))
        cls = request_class("delete_acls", version, "DeleteAclsRequest")
        filter_cls = request_class("delete_acls", version, "DeleteAclsFilter")
        response = await self.conn.send(cls(filters=tuple(
            filter_cls(resource_type_filter=f.resource_type.value,
                       resource_name_filter=f.name, pattern_type_filter=f.pattern_type.value,
                       principal_filter=f.principal, host_filter=f.host,
                       operation=f.operation.value, permission_type=f.permission.value)
            for f in filters)))
        removed: list[AclBinding] = []
        for result in response.filter_results:
            check(result.error_code, "removing ACLs", result.error_message)
            removed.extend(
                AclBinding(ResourcePattern(ResourceType(m.resource_type), m.resource_name,
                                           PatternType(m.pattern_type)),
                           AclEntry(m.principal, m.host, AclOperation(m.operation),
                                    AclPermissionType(m.permission_type)))
                for m in result.matching_acls)
        return removed
