"""DescribeConfigs (key 32, v1-4), AlterConfigs (key 33, v0-2), IncrementalAlterConfigs
(key 44, v0-1), and the dynamic broker configs they read and write.

Resources: TOPIC (2), BROKER (4) and GROUP (32). A BROKER resource is named by this broker's id (its
own dynamic configs) or ``""`` (the cluster-wide default); any other name is
INVALID_REQUEST, as Kafka answers for a broker that is not the one asked. BROKER_LOGGER (8)
and unknown types are INVALID_REQUEST: Odradek has no runtime logger levels to offer.
With an authorizer a TOPIC resource needs DescribeConfigs / AlterConfigs on the topic
(TOPIC_AUTHORIZATION_FAILED), a BROKER or BROKER_LOGGER one on the cluster
(CLUSTER_AUTHORIZATION_FAILED), a GROUP one on the group (GROUP_AUTHORIZATION_FAILED),
checked per resource.

A GROUP resource holds KIP-848's group configs (:mod:`odradek.coordinator.group_config`:
``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``), as Kafka 4.0's
ConfigHelper and ControllerConfigurationValidator serve them: the group need not exist;
an empty name is INVALID_REQUEST; DescribeConfigs lists every group config with its
value in effect, source GROUP_CONFIG (8) when the group overrides it, else
DEFAULT_CONFIG (the broker's ``group.consumer.*``); an alter's resulting set is checked as
``GroupConfig.validate`` (INVALID_CONFIG with Kafka's messages) and stored at
``/config/groups/<group>``, from where the coordinator applies it at each member's next
heartbeat.

Config sources follow Kafka's precedence, highest first: DYNAMIC_TOPIC_CONFIG (1, a topic
override), DYNAMIC_BROKER_CONFIG (2, ``/config/brokers/<id>``), DYNAMIC_DEFAULT_BROKER_CONFIG
(3, ``/config/brokers/<default>``), STATIC_BROKER_CONFIG (4, server.properties or an
override on the command line), DEFAULT_CONFIG (5). An entry's source is the source of the
first of its synonyms; with ``include_synonyms`` every level that has a value is listed,
across the broker-level names of the config (``log.retention.ms``, ``…minutes``, ``…hours``).

Dynamic broker configs (:data:`DYNAMIC_BROKER_KEYS`): the broker-level defaults of topic
configs (``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes`` …) apply at
once to every topic without an override and to the live logs; the log cleaner's restart its
threads; the connection limits apply to the next connections. A BROKER resource lists
every key of Kafka's KafkaConfig (:mod:`odradek.server.kafka_config_support`) with Kafka's
type, default and read-only flag (Kafka's update modes), passwords sensitive. An alter is
checked as Kafka's DynamicBrokerConfig.validateConfigs checks it, with its messages, all
INVALID_CONFIG ("Invalid config value for resource ConfigResource(type=BROKER, name='0'):
…"): a read-only key ("Cannot update these configs dynamically: Set(…)"), an SSL store
config without a listener prefix, a bad value for Kafka's type, a per-broker key as the
cluster default. Then Odradek's: a served key Odradek reads only at start-up
(``listeners``, ``advertised.listeners``, the per-listener security configs) says so. A
Kafka key Odradek does not serve (a feature it lacks, or a key that does not apply) that
passes Kafka's checks is stored, as Kafka stores it and as server.properties accepts it,
with no effect: the change is logged as start-up logs the key (a warning naming the missing
feature, a note for a key that does not apply), and DescribeConfigs says it is not served.
A TLS listener's keystore and truststore keys
(``listener.name.<listener>.ssl.keystore.location`` …) are checked by building the new
context as Kafka's SslFactory does (:mod:`odradek.server.tls_reload`).
A key that is not Kafka's is stored as Kafka stores custom broker configs. Password
configs are written encrypted with ``password.encoder.secret`` after every check (Kafka's
``toPersistentProps``; without a secret INVALID_CONFIG "Password encoder secret not
configured", except for ``validate_only``, as Kafka's), and an IncrementalAlterConfigs
works on the stored configs with their passwords decrypted
(:class:`~odradek.server.dynamic_config.DynamicBrokerConfig`).
``log.retention.hours`` / ``minutes``, ``log.roll.hours`` and ``log.roll.jitter.hours`` stay
static (as in Kafka).

AlterConfigs replaces the whole set of overrides of a resource; IncrementalAlterConfigs
applies SET (0), DELETE (1), APPEND (2) and SUBTRACT (3), the last two on list configs only
(starting from the override, or Kafka's default when there is none). A resource named twice
in one request, or a config key named twice in one resource, is INVALID_REQUEST.
``validate_only`` runs every check and changes nothing.

IncrementalAlterConfigs is a read-modify-write, and in a cluster this broker's view of the
stored overrides learns a change made through another broker only from its ZooKeeper
notification. So the operations are applied to the document read from the store itself,
and it is written back compare-and-set on the version read; when another write came
between, it is read and applied again (:func:`_alter_one`). Kafka's KRaft controller
serializes these changes; its ZooKeeper mode read the znode but wrote it unconditionally.
DescribeConfigs answers from this broker's view (docs/compatibility.md).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from odradek.cluster import topic_names
from odradek.cluster.metadata import ClusterMetadata, MetadataError
from odradek.cluster.store import UPDATE_ATTEMPTS, BadVersionError
from odradek.coordinator.group_config import (
    GROUP_CONFIG_DEFS,
    GroupConfigError,
    group_config_values,
    validate_group_configs,
)
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.security.tls import TlsConfigError
from odradek.server.authorization import (
    AclOperation,
    ResourceType,
    allowed,
    allowed_on_cluster,
)
from odradek.server.config import BROKER_CONFIGS, parse_kafka_value
from odradek.server.dynamic_config import DYNAMIC_BROKER_KEYS, parse_dynamic
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module
from odradek.server.handlers._errors import code_of
from odradek.server.handlers._transcode import OldVersions, register_with_old_versions
from odradek.server.kafka_config_support import (
    KAFKA_BROKER_CONFIGS,
    KAFKA_VERSION,
    PER_LISTENER_SECURITY_CONFIGS,
    PER_LISTENER_STATIC,
    is_not_applicable,
    kafka_key,
    unserved_reason,
)
from odradek.server.tls_reload import listener_tls_key
from odradek.storage.config import TOPIC_CONFIGS, ConfigDef, ConfigError, LogConfig, parse_value

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

log = logging.getLogger(__name__)

DESCRIBE_VERSIONS = (0, 4)
ALTER_VERSIONS = (0, 2)
INCREMENTAL_VERSIONS = (0, 1)

# Kafka's ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

# Kafka's DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8  # GROUP_CONFIG

# Kafka's DescribeConfigsResponse.ConfigType
CONFIG_TYPES = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
    "class": 8, "password": 9,
}

# Kafka's AlterConfigOp.OpType
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# Broker-level names of one setting, highest precedence first.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
}

# Defaults that are "not set" markers rather than values (Kafka's null).
_UNSET_DEFAULTS = {"log.retention.minutes": -2, "zookeeper.connection.timeout.ms": -1}

Synonym = tuple[str, str | None, int]


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (what Kafka's DescribeConfigs gives):
    the shortest digits, scientific notation outside [1e-3, 1e7)."""
    if value != value or value in (float("inf"), float("-inf")):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + int(exponent)  # digits before the decimal point
    minus = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        whole, frac = text[:point].ljust(point, "0"), text[point:]
        return f"{minus}{whole}.{frac or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"


def format_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    return str(value)


class ConfigRequestError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- dynamic broker configs ----------------------------------------------------------------
def broker_entity(services: BrokerServices, name: str) -> str:
    """The store entity of a BROKER resource name: ``<default>`` for "", the id for ours."""
    if name == "":
        return ClusterMetadata.DEFAULT_BROKER_ENTITY
    try:
        broker_id = int(name)
    except ValueError:
        raise ConfigRequestError(
            ErrorCode.invalid_request, f"broker id must be an integer, but it is: {name!r}"
        ) from None
    if broker_id != services.broker_id:
        raise ConfigRequestError(
            ErrorCode.invalid_request,
            f"unexpected broker id, expected {services.broker_id} or empty string, "
            f"but received {name}",
        )
    return str(broker_id)


def _kafka_set(names: Iterable[str]) -> str:
    """A set of config names as Kafka's messages print it (Scala's ``Set(a, b)``)."""
    return f"Set({', '.join(sorted(names))})"


def _read_only(key: str) -> bool:
    """Kafka's rule (DynamicConfig.Broker.nonDynamicProps): a KafkaConfig key that is not
    dynamically updatable; Odradek's own static keys count too."""
    k = KAFKA_BROKER_CONFIGS.get(key)
    if k is not None:
        return k.update_mode == "read-only"
    return key in BROKER_CONFIGS and key not in DYNAMIC_BROKER_KEYS


def _validate_broker_configs(
    services: BrokerServices, entity: str, configs: Mapping[str, str]
) -> None:
    """The checks of Kafka's DynamicBrokerConfig.validateConfigs, in its order, then
    Odradek's: every key must be one Odradek applies at runtime, or a custom (non-Kafka)
    key, which is stored as Kafka stores it."""
    static = [k for k in configs if _read_only(k)]
    if static:
        raise ConfigRequestError(ErrorCode.invalid_config,
                                 f"Cannot update these configs dynamically: {_kafka_set(static)}")
    listener_only = [k for k in configs if k in PER_LISTENER_SECURITY_CONFIGS]
    if listener_only:
        raise ConfigRequestError(
            ErrorCode.invalid_config,
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_kafka_set(listener_only)}",
        )
    for key, text in configs.items():
        d = BROKER_CONFIGS.get(key)
        k = kafka_key(key)
        try:
            if d is not None:
                parse_value(d, text)
            elif k is not None:
                parse_kafka_value(k, key, text)
        except ConfigError as exc:
            raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None
    if entity == ClusterMetadata.DEFAULT_BROKER_ENTITY:
        per_broker = [key for key in configs
                      if (k := kafka_key(key)) is not None and (
                          (k.update_mode == "per-broker" and key not in DYNAMIC_BROKER_KEYS)
                          or key.startswith("listener.name."))]
        if per_broker:
            raise ConfigRequestError(
                ErrorCode.invalid_config,
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {_kafka_set(per_broker)}",
            )
    # KIP-226: a listener's keystore and truststore (server/tls_reload.py)
    if any(listener_tls_key(key) for key in configs):
        reloader = services.tls_reloader
        if reloader is None:
            raise ConfigRequestError(ErrorCode.invalid_config,
                                     "this broker has no TLS listener to reload")
        try:
            reloader.validate(configs)
        except TlsConfigError as exc:
            raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None
    problems = []
    for key in sorted(configs):
        if key in DYNAMIC_BROKER_KEYS or listener_tls_key(key):
            continue
        reason = unserved_reason(key)
        if reason == PER_LISTENER_STATIC:  # served, from server.properties only
            problems.append(f"{key}: {reason}")
        elif reason is not None:
            continue  # Kafka stores it; so does Odradek, with no effect (_warn_unserved)
        elif key in BROKER_CONFIGS:
            problems.append(f"{key}: Odradek applies it only at start-up yet (set it in "
                            "server.properties and restart)")
    if problems:
        raise ConfigRequestError(ErrorCode.invalid_config, "; ".join(problems))
    # The resulting topic defaults must make a valid log config.
    md = services.metadata
    layers = {
        md.DEFAULT_BROKER_ENTITY: md.broker_configs(md.DEFAULT_BROKER_ENTITY),
        str(services.broker_id): md.broker_configs(str(services.broker_id)),
    }
    layers[entity] = dict(configs)
    candidate = services.dynamic_config.static_values()
    for name in (md.DEFAULT_BROKER_ENTITY, str(services.broker_id)):
        candidate.update(parse_dynamic(layers[name], name))
    try:
        LogConfig.build(candidate, {})
    except ConfigError as exc:
        raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None
    # Kafka's LogCleaner.validateReconfiguration and KafkaConfig's connection rule.
    threads = int(candidate["log.cleaner.threads"])
    current = int(md.broker_defaults.get("log.cleaner.threads", threads))
    if threads < 1:
        problem = "Log cleaner threads should be at least 1"
    elif threads < current // 2:
        problem = ("Log cleaner threads cannot be reduced to less than half the current "
                   f"value {current}")
    elif threads > current * 2:
        problem = ("Log cleaner threads cannot be increased to more than double the current "
                   f"value {current}")
    elif (int(candidate["max.connections.per.ip"]) == 0
          and not candidate["max.connections.per.ip.overrides"]):
        problem = ("max.connections.per.ip can be set to zero only if "
                   "max.connections.per.ip.overrides is set")
    else:
        return
    raise ConfigRequestError(ErrorCode.invalid_config, problem)


# -- describe ------------------------------------------------------------------------------
def _broker_synonyms(services: BrokerServices, key: str) -> list[Synonym]:
    """Every level holding a value for broker config ``key`` (and its synonyms), highest
    precedence first."""
    names = BROKER_SYNONYMS.get(key, (key,))
    md = services.metadata
    own = md.broker_configs(str(services.broker_id))
    default = md.broker_configs(md.DEFAULT_BROKER_ENTITY)
    raw = services.config.raw
    out: list[Synonym] = []
    for layer, source in ((own, SOURCE_DYNAMIC_BROKER), (default, SOURCE_DYNAMIC_DEFAULT_BROKER)):
        out.extend((n, layer[n], source) for n in names if n in layer)
    out.extend((n, raw[n].strip(), SOURCE_STATIC_BROKER) for n in names if n in raw)
    for n in names:
        d = BROKER_CONFIGS.get(n)
        if d is not None and d.default is not None and _UNSET_DEFAULTS.get(n) != d.default:
            out.append((n, format_value(d.default), SOURCE_DEFAULT))
    return out


def _make_entry(m: Any, name: str, value: str | None, read_only: bool, sensitive: bool,
                type_name: str | None, doc: str, synonyms: list[Synonym],
                include_synonyms: bool, include_docs: bool) -> Any:
    source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
    synonym_cls = getattr(m, "DescribeConfigsSynonym", None)
    listed: tuple[Any, ...] = ()
    if include_synonyms and synonym_cls is not None:
        listed = tuple(make(synonym_cls, name=n, value=None if sensitive else v, source=s)
                       for n, v, s in synonyms)
    return make(
        m.DescribeConfigsResourceResult, name=name, value=None if sensitive else value,
        read_only=read_only, config_source=source, is_sensitive=sensitive, synonyms=listed,
        config_type=CONFIG_TYPES.get(type_name or "", 0),
        documentation=doc if include_docs else None,
    )


def _entry(m: Any, d: ConfigDef, value: str | None, read_only: bool,
           synonyms: list[Synonym], include_synonyms: bool, include_docs: bool) -> Any:
    return _make_entry(m, d.name, value, read_only, False, d.type, d.doc, synonyms,
                       include_synonyms, include_docs)


def _wanted(names: Iterable[str] | None, keys: Iterable[str]) -> list[str]:
    if names is None:
        return sorted(keys)
    allowed = set(keys)
    return [n for n in dict.fromkeys(names) if n in allowed]


def _topic_synonyms(
    services: BrokerServices, key: str, overrides: Mapping[str, str]
) -> list[Synonym]:
    """Every level holding a value for topic config ``key``, highest precedence first."""
    synonyms: list[Synonym] = []
    if key in overrides:
        synonyms.append((key, overrides[key], SOURCE_DYNAMIC_TOPIC))
    broker_key = TOPIC_CONFIGS[key].broker_key
    if broker_key:
        synonyms.extend(_broker_synonyms(services, broker_key))
    return synonyms


def topic_config_entries(
    services: BrokerServices, overrides: Mapping[str, str]
) -> list[tuple[str, str | None, int]]:
    """(name, effective value, source) of every topic config for a topic with these
    ``overrides`` — what CreateTopics v5+ answers, with the sources DescribeConfigs gives."""
    effective = LogConfig.build(services.metadata.broker_defaults, overrides)
    out = []
    for key in sorted(TOPIC_CONFIGS):
        synonyms = _topic_synonyms(services, key, overrides)
        out.append((key, format_value(effective[key]),
                    synonyms[0][2] if synonyms else SOURCE_DEFAULT))
    return out


def describe_topic(m: Any, services: BrokerServices, name: str, names: Iterable[str] | None,
                   include_synonyms: bool, include_docs: bool) -> list[Any]:
    overrides = _check_topic(services, name)
    effective = services.metadata.log_config(name)
    return [
        _entry(m, TOPIC_CONFIGS[key], format_value(effective[key]), False,
               _topic_synonyms(services, key, overrides), include_synonyms, include_docs)
        for key in _wanted(names, TOPIC_CONFIGS)
    ]


def _static_synonyms(services: BrokerServices, key: str, default: str | None) -> list[Synonym]:
    """The levels of a key Odradek keeps no value of (unserved or custom): what each dynamic
    entity stores, server.properties, and Kafka's default."""
    md = services.metadata
    out: list[Synonym] = []
    for entity, source in ((str(services.broker_id), SOURCE_DYNAMIC_BROKER),
                           (md.DEFAULT_BROKER_ENTITY, SOURCE_DYNAMIC_DEFAULT_BROKER)):
        stored = md.broker_configs(entity)
        if key in stored:
            out.append((key, stored[key], source))
    if key in services.config.raw:
        out.append((key, services.config.raw[key].strip(), SOURCE_STATIC_BROKER))
    if default is not None:
        out.append((key, default, SOURCE_DEFAULT))
    return out


def _broker_entry(m: Any, services: BrokerServices, key: str, default_entity: bool,
                  include_synonyms: bool, include_docs: bool) -> Any:
    """One broker config as Kafka's ConfigHelper.createBrokerConfigEntry describes it: the
    value in effect (Odradek's for a served key; for another Kafka key the value set, else
    Kafka's default), read_only by Kafka's dynamic update rules, passwords and keys of no
    known type sensitive (value null)."""
    k = kafka_key(key)
    d = BROKER_CONFIGS.get(key)
    if d is not None:
        synonyms = _broker_synonyms(services, key)
        if default_entity:
            value: str | None = services.metadata.broker_configs(
                ClusterMetadata.DEFAULT_BROKER_ENTITY)[key]
        else:
            value = format_value(services.metadata.broker_defaults.get(
                key, services.config.get(key)))
            if k is not None and k.default is None and (
                    value == "" or value == format_value(_UNSET_DEFAULTS.get(key))):
                value = None  # Odradek's "not set" is Kafka's null
        type_name: str | None = k.type if k is not None else d.type
        doc = d.doc
    else:
        synonyms = _static_synonyms(services, key, k.default if k is not None else None)
        if default_entity:
            value = services.metadata.broker_configs(ClusterMetadata.DEFAULT_BROKER_ENTITY)[key]
        else:
            value = synonyms[0][1] if synonyms else None
        type_name = k.type if k is not None else None
        reason = unserved_reason(key)
        doc = (f"Kafka {KAFKA_VERSION} broker config, not served by Odradek: {reason}"
               if reason else "not a Kafka broker config: stored, no effect")
    if default_entity:
        synonyms = [s for s in synonyms if s[2] == SOURCE_DYNAMIC_DEFAULT_BROKER]
    sensitive = type_name in (None, "password")
    read_only = _read_only(key) if (k is not None or d is not None) else True
    return _make_entry(m, key, value, read_only, sensitive, type_name, doc, synonyms,
                       include_synonyms, include_docs)


def broker_config_names(services: BrokerServices) -> list[str]:
    """What DescribeConfigs lists for this broker: every Kafka broker config, Odradek's own,
    and whatever server.properties or a dynamic entity sets (Kafka's allConfigs)."""
    md = services.metadata
    names = set(KAFKA_BROKER_CONFIGS) | set(BROKER_CONFIGS) | set(services.config.raw)
    names |= set(md.broker_configs(str(services.broker_id)))
    names |= set(md.broker_configs(md.DEFAULT_BROKER_ENTITY))
    return sorted(names)


def describe_broker(m: Any, services: BrokerServices, name: str, names: Iterable[str] | None,
                    include_synonyms: bool, include_docs: bool) -> list[Any]:
    entity = broker_entity(services, name)
    default_entity = entity == ClusterMetadata.DEFAULT_BROKER_ENTITY
    keys = (services.metadata.broker_configs(entity) if default_entity
            else broker_config_names(services))
    return [_broker_entry(m, services, key, default_entity, include_synonyms, include_docs)
            for key in _wanted(names, keys)]


# -- group configs (KIP-848) -----------------------------------------------------------------
def _check_group(name: str) -> str:
    if not name:
        raise ConfigRequestError(ErrorCode.invalid_request, "Group name must not be empty")
    return name


#: The longest group name whose configs are stored: Kafka's longest STRING (the longest
#: group id a request of a non-flexible version carries). Its node name, URL-encoded, is
#: then at most 3 times that, well within what one ZooKeeper request may carry
#: (``jute.maxbuffer``, 1 MB: a longer request makes the server drop the connection, the
#: broker's session with it); Kafka itself (KRaft) sets no bound.
MAX_GROUP_NAME_BYTES = 32767


def _broker_group_configs(services: BrokerServices) -> dict[str, Any]:
    """The broker's configs a group config is checked against or defaults to."""
    keys = {k for d in GROUP_CONFIG_DEFS.values() for k in (d.broker_key, d.min_key, d.max_key)}
    return {k: services.config[k] for k in keys}


def describe_group(m: Any, services: BrokerServices, name: str, names: Iterable[str] | None,
                   include_synonyms: bool, include_docs: bool) -> list[Any]:
    overrides = services.metadata.group_configs.get(_check_group(name), {})
    values = group_config_values(_broker_group_configs(services), overrides)
    entries = []
    for key in _wanted(names, GROUP_CONFIG_DEFS):
        source = SOURCE_GROUP if key in overrides else SOURCE_DEFAULT
        value = str(values[key])
        entries.append(_make_entry(m, key, value, False, False, "int",
                                   GROUP_CONFIG_DEFS[key].doc, [(key, value, source)],
                                   include_synonyms, include_docs))
    return entries


def _check_group_configs(services: BrokerServices, configs: Mapping[str, str]) -> None:
    try:
        validate_group_configs(_broker_group_configs(services), configs)
    except GroupConfigError as exc:
        raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None


# -- alter -----------------------------------------------------------------------------------
def _check_topic(services: BrokerServices, name: str) -> dict[str, str]:
    try:
        topic_names.validate(name)
    except topic_names.InvalidTopicNameError as exc:
        raise ConfigRequestError(ErrorCode.invalid_topic_exception, str(exc)) from None
    info = services.metadata.get(name)
    if info is None:
        raise ConfigRequestError(ErrorCode.unknown_topic_or_partition,
                                 f"topic {name!r} does not exist")
    return dict(info.configs)


def _target(services: BrokerServices, resource_type: int, name: str) -> str:
    """The store entity (or topic) of an alterable resource; the topic must exist."""
    if resource_type == RESOURCE_TOPIC:
        _check_topic(services, name)
        return name
    if resource_type == RESOURCE_BROKER:
        return broker_entity(services, name)
    if resource_type == RESOURCE_GROUP:
        if len(name.encode()) > MAX_GROUP_NAME_BYTES:
            raise ConfigRequestError(ErrorCode.invalid_request, "Group name is longer than "
                                     f"{MAX_GROUP_NAME_BYTES} bytes")
        return _check_group(name)
    raise ConfigRequestError(ErrorCode.invalid_request, _unsupported_type(resource_type))


def _alter_one(services: BrokerServices, resource: Any, incremental: bool,
               validate_only: bool) -> None:
    """Alter (or validate) one resource: its operations applied to the overrides the store
    holds now (IncrementalAlterConfigs) or the overrides replaced (AlterConfigs), checked,
    and written compare-and-set, applied again to a fresh read when another write comes
    between (:meth:`MetadataStore.update_config`)."""
    resource_type = resource.resource_type
    target = _target(services, resource_type, resource.resource_name)

    def change(current: dict[str, str]) -> dict[str, str]:
        broker = resource_type == RESOURCE_BROKER
        if incremental:
            # passwords decoded, the operations applied, encoded again (Kafka's
            # fromPersistentProps / toPersistentProps)
            configs = (services.dynamic_config.from_persistent(current, target) if broker
                       else dict(current))
            for c in resource.configs:
                _apply_op(resource_type, configs, c.config_operation, c.name, c.value)
        else:
            configs = {c.name: c.value for c in resource.configs if c.value is not None}
        if broker:
            _check_broker_configs(services, target, configs)
            if not validate_only:  # as Kafka's: validate_only encodes nothing
                configs = _persistent(services, target, configs, current)
        elif resource_type == RESOURCE_GROUP:
            _check_group_configs(services, configs)
        return configs

    md = services.metadata
    try:
        if resource_type == RESOURCE_TOPIC:
            md.update_topic_configs(target, change, validate_only)
        elif resource_type == RESOURCE_GROUP:
            if validate_only:
                change(md.read_configs(md.group_config_path(target)))
            else:
                configs = md.update_group_configs(target, change)
                log.info("group configs of %s are now %s", target, configs)
        elif validate_only:
            change(md.read_configs(md.broker_config_path(target)))
        else:
            configs = md.update_broker_configs(target, change)
            # layered again where the local view changes: on the event loop
            md.apply_locally(services.dynamic_config.apply)
            log.info("dynamic broker configs of %s are now %s", target, _loggable(configs))
            _warn_unserved(target, configs, (c.name for c in resource.configs
                                             if _sets(c, incremental)))
    except MetadataError as exc:
        raise ConfigRequestError(code_of(exc.kafka_error), str(exc)) from None
    except BadVersionError:
        raise ConfigRequestError(
            ErrorCode.unknown_server_error,
            f"the configs of {target} changed {UPDATE_ATTEMPTS} times while this change "
            "was applied to them; try again") from None


def _sets(config: Any, incremental: bool) -> bool:
    """Whether an alter's entry gives its key a value (not a DELETE, not a null)."""
    if incremental:
        return bool(config.config_operation != OP_DELETE)
    return config.value is not None


def _warn_unserved(target: str, configs: Mapping[str, str], keys: Iterable[str]) -> None:
    """Once for each unserved Kafka key an alter has just stored: what server.properties
    says of it at start-up (a warning naming the missing feature; a note for a key that does
    not apply, or that holds Kafka's default)."""
    for key in sorted(set(keys)):
        reason = unserved_reason(key)
        if reason is None or key not in configs or listener_tls_key(key):
            continue  # (a listener's keystore and truststore keys are served: tls_reload)
        k = kafka_key(key)
        harmless = k is not None and configs[key].strip() == (k.default or "")
        level = logging.INFO if is_not_applicable(reason) or harmless else logging.WARNING
        log.log(level, "broker config %s is stored but has no effect: %s (dynamic broker "
                "configs of %s)", key, reason, target)


def _unsupported_type(resource_type: int) -> str:
    if resource_type == RESOURCE_BROKER_LOGGER:
        return "BROKER_LOGGER resources are not supported: Odradek has no runtime log levels"
    return f"unsupported config resource type {resource_type}"


def _invalid_broker_config(target: str, message: str) -> ConfigRequestError:
    name = "" if target == ClusterMetadata.DEFAULT_BROKER_ENTITY else target
    return ConfigRequestError(  # Kafka's words (ZkAdminManager.alterConfigs)
        ErrorCode.invalid_config,
        f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): "
        f"{message}",
    )


def _check_broker_configs(services: BrokerServices, target: str,
                          configs: Mapping[str, str]) -> None:
    try:
        _validate_broker_configs(services, target, configs)
    except ConfigRequestError as exc:
        if exc.code != ErrorCode.invalid_config:
            raise
        raise _invalid_broker_config(target, str(exc)) from None


def _persistent(services: BrokerServices, target: str, configs: Mapping[str, str],
                stored: Mapping[str, str]) -> dict[str, str]:
    """The broker configs to write: passwords encrypted with password.encoder.secret
    (:meth:`DynamicBrokerConfig.to_persistent`); Kafka's INVALID_CONFIG without a secret
    or at the cluster default."""
    try:
        return services.dynamic_config.to_persistent(configs, target, stored)
    except ConfigError as exc:
        raise _invalid_broker_config(target, str(exc)) from None


def _loggable(configs: Mapping[str, str]) -> dict[str, str]:
    """``configs`` with the values of password configs, and of configs whose type is not
    known, hidden (Kafka's ``KafkaConfig.maybeSensitive``, as DescribeConfigs)."""
    def secret(key: str) -> bool:
        d = BROKER_CONFIGS.get(key)
        k = kafka_key(key)
        if d is None and k is None:
            return True
        return ((d is not None and d.type == "password")
                or (k is not None and k.type == "password"))

    return {key: "[hidden]" if secret(key) else value for key, value in configs.items()}


def _definition(resource_type: int, key: str) -> ConfigDef | None:
    if resource_type == RESOURCE_GROUP:
        if key not in GROUP_CONFIG_DEFS:
            return None
        return ConfigDef(key, "int", None, None, GROUP_CONFIG_DEFS[key].doc)
    table = TOPIC_CONFIGS if resource_type == RESOURCE_TOPIC else BROKER_CONFIGS
    return table.get(key)


def _apply_op(resource_type: int, configs: dict[str, str], op: int, key: str,
              value: str | None) -> None:
    if op == OP_SET:
        if value is None:
            raise ConfigRequestError(ErrorCode.invalid_request,
                                     f"null value not supported for: {key}")
        configs[key] = value
    elif op == OP_DELETE:
        configs.pop(key, None)
    elif op in (OP_APPEND, OP_SUBTRACT):
        d = _definition(resource_type, key)
        verb = "append" if op == OP_APPEND else "subtract"
        k = kafka_key(key) if resource_type == RESOURCE_BROKER and d is None else None
        if d is None and k is None:
            raise ConfigRequestError(ErrorCode.invalid_config, f"unknown config {key!r}")
        if (d.type if d is not None else k.type if k is not None else None) != "list":
            raise ConfigRequestError(
                ErrorCode.invalid_config,
                f"config value {verb} is not allowed for config key: {key} (not a list)",
            )
        if key in configs:
            current = [v.strip() for v in configs[key].split(",") if v.strip()]
        elif d is not None:
            current = list(d.default or ())
        else:  # a Kafka key Odradek does not serve: from Kafka's default
            current = [v for v in ((k.default if k else None) or "").split(",") if v]
        items = [v.strip() for v in (value or "").split(",") if v.strip()]
        if op == OP_APPEND:
            current += [v for v in items if v not in current]
        else:
            current = [v for v in current if v not in items]
        configs[key] = ",".join(current)
    else:
        raise ConfigRequestError(ErrorCode.invalid_request,
                                 f"unknown alter configs operation type {op}")


def _duplicates(resources: Iterable[Any]) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


def register_configs(registry: HandlerRegistry, services: BrokerServices) -> None:
    # v0 (admin tools of Kafka 0.11; KIP-896 removed it, kio lacks it) is transcoded to v1.
    register_with_old_versions(registry, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_VERSIONS[1],
                               bind(describe_configs, services),
                               OldVersions(0, 1, _describe_v0, _described_v0))
    registry.register(ApiKey.ALTER_CONFIGS, ALTER_VERSIONS[0], ALTER_VERSIONS[1],
                      bind(alter_configs, services))
    registry.register(ApiKey.INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_VERSIONS[0],
                      INCREMENTAL_VERSIONS[1], bind(incremental_alter_configs, services))


async def describe_configs(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("describe_configs", ctx.api_version)
    synonyms = bool(getattr(request, "include_synonyms", False))
    docs = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        code, message, entries = ErrorCode.none, None, []
        try:
            _authorize(services, ctx, AclOperation.DESCRIBE_CONFIGS, resource)
            if resource.resource_type == RESOURCE_TOPIC:
                entries = describe_topic(m, services, resource.resource_name,
                                         resource.configuration_keys, synonyms, docs)
            elif resource.resource_type == RESOURCE_BROKER:
                entries = describe_broker(m, services, resource.resource_name,
                                          resource.configuration_keys, synonyms, docs)
            elif resource.resource_type == RESOURCE_GROUP:
                entries = describe_group(m, services, resource.resource_name,
                                         resource.configuration_keys, synonyms, docs)
            else:
                raise ConfigRequestError(ErrorCode.invalid_request,
                                         _unsupported_type(resource.resource_type))
        except ConfigRequestError as exc:
            code, message = exc.code, str(exc)
        results.append(make(m.DescribeConfigsResult, error_code=code, error_message=message,
                            resource_type=resource.resource_type,
                            resource_name=resource.resource_name, configs=tuple(entries)))
    return make(m.DescribeConfigsResponse, throttle_time=ZERO_THROTTLE,
                results=tuple(results))


def _authorize(services: BrokerServices, ctx: RequestContext, operation: AclOperation,
               resource: Any) -> None:
    """DescribeConfigs / AlterConfigs on the topic, or on the cluster for a broker or
    broker-logger resource (Kafka's ``ConfigHelper`` / ``authorizeConfigResource``)."""
    authorizer = services.authorizer
    if authorizer is None:
        return
    if resource.resource_type == RESOURCE_TOPIC:
        if not allowed(authorizer, ctx, operation, ResourceType.TOPIC, resource.resource_name):
            raise ConfigRequestError(ErrorCode.topic_authorization_failed,
                                     "Authorization failed.")
    elif resource.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and not (
            allowed_on_cluster(authorizer, ctx, operation)):
        raise ConfigRequestError(ErrorCode.cluster_authorization_failed,
                                 "Authorization failed.")
    elif resource.resource_type == RESOURCE_GROUP and not allowed(
            authorizer, ctx, operation, ResourceType.GROUP, resource.resource_name):
        raise ConfigRequestError(ErrorCode.group_authorization_failed,
                                 "Authorization failed.")


def _refusals(services: BrokerServices, ctx: RequestContext,
              request: Any) -> dict[int, ConfigRequestError]:
    """The resources (by index) the caller may not alter, decided on the event loop: the
    authorizer is the loop's (docs/architecture.md, "Threads")."""
    refused = {}
    for i, resource in enumerate(request.resources):
        try:
            _authorize(services, ctx, AclOperation.ALTER_CONFIGS, resource)
        except ConfigRequestError as exc:
            refused[i] = exc
    return refused


def _alter(services: BrokerServices, m: Any, request: Any, incremental: bool,
           refused: Mapping[int, ConfigRequestError]) -> list[Any]:
    """Alter (or validate) each resource's configs, but the ``refused``; one answer per
    resource."""
    duplicates = _duplicates(request.resources)
    responses = []
    for i, resource in enumerate(request.resources):
        code, message = ErrorCode.none, None
        try:
            if i in refused:
                raise refused[i]
            if (resource.resource_type, resource.resource_name) in duplicates:
                raise ConfigRequestError(ErrorCode.invalid_request,
                                         "error due to duplicate config resource")
            keys = Counter(c.name for c in resource.configs)
            repeated = sorted(k for k, n in keys.items() if n > 1)
            if repeated:
                raise ConfigRequestError(ErrorCode.invalid_request,
                                         f"error due to duplicate config keys: {repeated}")
            _alter_one(services, resource, incremental, request.validate_only)
        except ConfigRequestError as exc:
            code, message = exc.code, str(exc)
        responses.append(make(m.AlterConfigsResourceResponse, error_code=code,
                              error_message=message, resource_type=resource.resource_type,
                              resource_name=resource.resource_name))
    return responses


async def _altered(services: BrokerServices, ctx: RequestContext, m: Any, request: Any,
                   incremental: bool) -> list[Any]:
    refused = _refusals(services, ctx, request)
    if services.metadata.remote:  # cluster mode: the ZooKeeper writes off the loop
        return await asyncio.to_thread(services.metadata.off_loop(  # a copy of the topics
            lambda: _alter(services, m, request, incremental, refused)))
    return _alter(services, m, request, incremental, refused)


async def alter_configs(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    m = response_module("alter_configs", ctx.api_version)
    return make(m.AlterConfigsResponse, throttle_time=ZERO_THROTTLE,
                responses=tuple(await _altered(services, ctx, m, request, incremental=False)))


async def incremental_alter_configs(
    services: BrokerServices, ctx: RequestContext, request: Any,
) -> Any:
    m = response_module("incremental_alter_configs", ctx.api_version)
    return make(m.IncrementalAlterConfigsResponse, throttle_time=ZERO_THROTTLE,
                responses=tuple(await _altered(services, ctx, m, request, incremental=True)))


# Kafka's ConfigSource.DEFAULT_CONFIG: what DescribeConfigs v0's ``is_default`` stood for.
_DEFAULT_CONFIG_SOURCE = 5


def _describe_v0(body: bytes, version: int) -> bytes:
    """DescribeConfigs v0 is v1 without ``include_synonyms`` (false) at the end."""
    return body + b"\x00"


def _string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _described_v0(response: Any, version: int) -> bytes:
    """The v1 answer in v0's layout: each config's ``config_source`` becomes ``is_default``
    (the source is DEFAULT_CONFIG), and there are no synonyms."""
    out = bytearray(struct.pack(">ii", int(response.throttle_time.total_seconds() * 1000),
                                len(response.results)))
    for r in response.results:
        out += struct.pack(">h", int(r.error_code.value)) + _string(r.error_message)
        out += struct.pack(">b", int(r.resource_type)) + _string(r.resource_name)
        out += struct.pack(">i", len(r.configs))
        for c in r.configs:
            out += _string(c.name) + _string(c.value)
            out += struct.pack(">???", c.read_only,
                               int(c.config_source) == _DEFAULT_CONFIG_SOURCE, c.is_sensitive)
    return bytes(out)
