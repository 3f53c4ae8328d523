"""``odradek configs`` (Kafka's kafka-configs.sh): describe and alter configs and quotas.

    odradek configs --bootstrap-server H:P --entity-type clients|topics|brokers|users
        [--entity-name N | --entity-default]
        [--entity-type clients [--entity-name N | --entity-default]]   (users + clients)
        --describe [--all] | --alter [--add-config k=v,...] [--delete-config k,...]

Topics and brokers go through DescribeConfigs and IncrementalAlterConfigs, client quotas
through DescribeClientQuotas and AlterClientQuotas (KIP-546), users' SCRAM credentials
through AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554:
``--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'``, the password
salted and hashed here, never sent; ``--delete-config SCRAM-SHA-512``). As with
kafka-configs.sh, a broker's ``--describe`` lists its dynamic configs, ``--describe --all``
every config in effect with where its value comes from; ``--entity-default`` is the
cluster-wide default broker (or client id, or user). Quotas of users and of a user's
client ids (KIP-55) are given as kafka-configs.sh takes them: ``--entity-type users
--entity-name alice`` (or ``--entity-default``), followed for the combined entity by
``--entity-type clients --entity-name app`` (or ``--entity-default``); each
``--entity-name`` / ``--entity-default`` goes with the ``--entity-type`` in the same
position. A user's ``--add-config`` may mix quotas and SCRAM credentials. ``ips`` entities
are refused: per-address connection quotas are broker configs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from odradek.cli._common import UsageError, add_bootstrap, run_with_admin, security_of

if TYPE_CHECKING:
    from odradek.client.admin import Admin
    from odradek.client.security import ClientSecurity

# DescribeConfigs config sources (Kafka's ConfigSource).
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
ENTITY_TYPES = ("topics", "clients", "brokers", "users", "ips")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
# kafka-configs.sh's entity types as KIP-546 names them, and as its output shows them.
_QUOTA_TYPES = {"users": "user", "clients": "client-id"}
_SHOWN = {"user": "user-principal", "client-id": "client-id"}
_ANY = "\0any"  # no --entity-name / --entity-default for this type: every entity
_REFUSED = {
    "ips": "ip quotas are not supported; use the broker configs max.connections.per.ip, "
           "max.connections.per.ip.overrides and max.connection.creation.rate",
}


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "configs", help="describe and alter topic, broker and client-quota configs",
        description="Kafka's kafka-configs.sh: configs of topics and brokers, and client "
                    "quotas (producer_byte_rate, consumer_byte_rate, request_percentage, "
                    "controller_mutation_rate).",
    )
    add_bootstrap(parser)
    parser.add_argument("--entity-type", required=True, choices=ENTITY_TYPES,
                        action="append", dest="entity_types",
                        help="what the configs belong to (users then clients: a user's "
                             "client id)")
    parser.add_argument("--entity-name", action=_EntityName, dest="entity_names",
                        help="topic name, broker id, client id or user")
    parser.add_argument("--entity-default", action=_EntityDefault, nargs=0,
                        dest="entity_names",
                        help="the default broker, client id or user")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--describe", action="store_true", help="print the configs")
    what.add_argument("--alter", action="store_true",
                      help="change them with --add-config and --delete-config")
    parser.add_argument("--all", action="store_true",
                        help="with --describe of a broker: every config, not only dynamic ones")
    parser.add_argument("--add-config", metavar="K=V,...",
                        help="configs to set, comma-separated (a list value in [a,b])")
    parser.add_argument("--delete-config", metavar="K,...", help="configs to remove")
    parser.set_defaults(func=_run)


class _EntityName(argparse.Action):
    """Each --entity-name / --entity-default in order (None: the default), paired by
    position with the --entity-type options, as kafka-configs.sh pairs them."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        names = list(getattr(namespace, self.dest, None) or [])
        names.append(values)
        setattr(namespace, self.dest, names)


class _EntityDefault(_EntityName):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, None, option_string)


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` as kafka-configs.sh reads it: commas inside brackets belong to
    the value, and the brackets go."""
    out: dict[str, str] = {}
    items: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"odradek: invalid --add-config entry {item!r}: expected key=value")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key] = value
    return out


def _keys(text: str | None) -> list[str]:
    return [k.strip() for k in (text or "").split(",") if k.strip()]


def _entities(args: argparse.Namespace) -> str | None:
    """Pair the entity types with their names; an error message, or None."""
    types: list[str] = args.entity_types
    names: list[str | None] = list(args.entity_names or [])
    if len(names) > len(types):
        return "each --entity-name or --entity-default needs its own --entity-type"
    if len(types) > 1 and types != ["users", "clients"]:
        return ("only --entity-type users followed by --entity-type clients can be combined "
                "(a user's client id)")
    args.entity_pairs = [(t, names[i] if i < len(names) else _ANY) for i, t in enumerate(types)]
    args.entity_type = types[0]
    first = args.entity_pairs[0][1]
    args.entity_name = None if first in (None, _ANY) else first
    args.entity_default = first is None
    return None


def _run(args: argparse.Namespace) -> int:
    problem = _entities(args)
    if problem is not None:
        print(f"odradek: {problem}", file=sys.stderr)
        return 2
    if args.entity_type in _REFUSED:
        print(f"odradek: {_REFUSED[args.entity_type]}", file=sys.stderr)
        return 2
    if args.entity_type == "topics" and args.entity_default:
        print("odradek: --entity-default is not valid for topics", file=sys.stderr)
        return 2
    if args.entity_type == "users":
        return _users(args)
    if args.alter:
        if args.entity_name is None and not args.entity_default:
            print("odradek: --alter needs --entity-name or --entity-default", file=sys.stderr)
            return 2
        if not args.add_config and not args.delete_config:
            print("odradek: --alter needs --add-config or --delete-config", file=sys.stderr)
            return 2
        set_ = parse_add_config(args.add_config or "")
        delete = _keys(args.delete_config)
        return run_with_admin(args, lambda admin: _alter(admin, args, set_, delete))
    if args.add_config or args.delete_config:
        print("odradek: --add-config and --delete-config go with --alter", file=sys.stderr)
        return 2
    return run_with_admin(args, lambda admin: _describe(admin, args))


def _users(args: argparse.Namespace) -> int:
    """Quotas and SCRAM credentials of a user, and quotas of a user's client ids
    (kafka-configs.sh --entity-type users [--entity-type clients])."""
    from odradek.security.sasl import SCRAM_MECHANISMS, SCRAM_MIN_ITERATIONS

    combined = len(args.entity_pairs) > 1
    if not args.alter:
        if args.add_config or args.delete_config:
            print("odradek: --add-config and --delete-config go with --alter", file=sys.stderr)
            return 2
        return run_with_admin(args, lambda admin: _describe_users(admin, args, combined))
    if any(name == _ANY for _, name in args.entity_pairs):
        print("odradek: --alter of users needs --entity-name or --entity-default for each "
              "--entity-type", file=sys.stderr)
        return 2
    set_ = parse_add_config(args.add_config or "")
    delete = _keys(args.delete_config)
    if not set_ and not delete:
        print("odradek: --alter needs --add-config or --delete-config", file=sys.stderr)
        return 2
    scram = not combined and not args.entity_default
    for key in [*set_, *delete]:
        if key not in QUOTA_KEYS and not (scram and key in SCRAM_MECHANISMS):
            allowed = ", ".join([*QUOTA_KEYS, *(SCRAM_MECHANISMS if scram else ())])
            print(f"odradek: {key} is not a config of this entity (allowed: {allowed})",
                  file=sys.stderr)
            return 2
    quota_set = {k: v for k, v in set_.items() if k in QUOTA_KEYS}
    quota_delete = [k for k in delete if k in QUOTA_KEYS]
    upsertions = []
    for mechanism, text in set_.items():
        if mechanism in QUOTA_KEYS:
            continue
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        password = fields.get("password")
        if not password:
            print(f"odradek: {mechanism} needs password=... (as [iterations=N,password=P])",
                  file=sys.stderr)
            return 2
        try:
            iterations = int(fields.get("iterations", SCRAM_MIN_ITERATIONS))
        except ValueError:
            print(f"odradek: iterations of {mechanism} must be a number", file=sys.stderr)
            return 2
        upsertions.append((args.entity_name, mechanism, iterations, password))
    deletions = [(args.entity_name, m) for m in delete if m not in QUOTA_KEYS]
    values = _quota_values(quota_set)
    if values is None:
        return 2
    entity = [(_QUOTA_TYPES[t], n) for t, n in args.entity_pairs]

    async def alter(admin: Admin) -> int:
        if values or quota_delete:
            await admin.alter_client_quotas(entity, values, quota_delete)
        if upsertions or deletions:
            await admin.alter_user_scram_credentials(upsertions, deletions)
        print(f"Completed updating config for {_entity_text(dict(entity))}.")
        return 0

    return run_with_admin(args, alter)


def _quota_values(set_: dict[str, str]) -> dict[str, float] | None:
    values: dict[str, float] = {}
    for key, text in set_.items():
        try:
            values[key] = float(text)
        except ValueError:
            print(f"odradek: quota {key} must be a number, not {text!r}", file=sys.stderr)
            return None
    return values


def _entity_text(entity: dict[str, str | None]) -> str:
    """kafka-configs.sh's words for an entity: ``user-principal 'alice', client-id 'app'``
    (``the default client-id`` for a default component)."""
    return ", ".join(
        f"the default {_SHOWN[t]}" if entity[t] is None else f"{_SHOWN[t]} '{entity[t]}'"
        for t in ("user", "client-id") if t in entity
    )


async def _describe_quotas(admin: Admin, pairs: list[tuple[str, str | None]]) -> None:
    """Print the quotas of the entities with exactly these types, matching each name
    (None: the default; :data:`_ANY`: any name or the default)."""
    wanted = {_QUOTA_TYPES[t]: n for t, n in pairs}
    components = [(t, 1 if n is None else 0, n) for t, n in wanted.items() if n != _ANY]
    for entity, quotas in await admin.describe_client_quotas(components):
        if set(entity) != set(wanted):
            continue
        values = ", ".join(f"{k}={v}" for k, v in sorted(quotas.items()))
        print(f"Quota configs for {_entity_text(entity)} are {values}")


async def _describe_users(admin: Admin, args: argparse.Namespace, combined: bool) -> int:
    await _describe_quotas(admin, args.entity_pairs)
    if combined or args.entity_default:
        return 0
    users = [args.entity_name] if args.entity_name else None
    for user, mechanisms in sorted((await admin.describe_user_scram_credentials(users)).items()):
        values = ",".join(f"{m}=iterations={i}" for m, i in sorted(mechanisms.items()))
        print(f"SCRAM credential configs for user-principal '{user}' are {values}")
    return 0


async def _alter(admin: Admin, args: argparse.Namespace, set_: dict[str, str],
                 delete: list[str]) -> int:
    from odradek.client.admin import BROKER_RESOURCE, TOPIC_RESOURCE

    if args.entity_type == "clients":
        values = _quota_values(set_)
        if values is None:
            return 2
        name = None if args.entity_default else args.entity_name
        await admin.alter_client_quotas([("client-id", name)], values, delete)
        shown = "the default client-id" if name is None else f"client-id {name}"
        print(f"Completed updating config for {shown}.")
        return 0
    if args.entity_type == "topics":
        await admin.alter_configs(TOPIC_RESOURCE, args.entity_name, set_, delete)
        print(f"Completed updating config for topic {args.entity_name}.")
        return 0
    name = "" if args.entity_default else args.entity_name
    await admin.alter_configs(BROKER_RESOURCE, name, set_, delete)
    if args.entity_default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for broker {name}.")
    return 0


async def _describe(admin: Admin, args: argparse.Namespace) -> int:
    from odradek.client.admin import TOPIC_RESOURCE

    if args.entity_type == "clients":
        await _describe_quotas(admin, args.entity_pairs)
        return 0
    if args.entity_type == "topics":
        names = [args.entity_name] if args.entity_name else sorted(
            t.name for t in await admin.metadata())
        for name in names:
            configs = await admin.describe_configs(TOPIC_RESOURCE, name)
            print(f"Dynamic configs for topic {name} are:")
            _print(configs, lambda source: source == 1)
        return 0
    brokers = await admin.brokers()
    if args.entity_default:
        names = [""]
    elif args.entity_name:
        names = [args.entity_name]
    else:
        names = [str(node) for node in sorted(brokers)]
    for name in names:
        configs = await _broker_configs(admin, brokers, name, security_of(args))
        if args.all:
            print(f"All configs for broker {name} are:" if name else
                  "All configs for the default broker are:")
            _print(configs, lambda _source: True)
        elif name:
            print(f"Dynamic configs for broker {name} are:")
            _print(configs, lambda source: source in (2, 3))
        else:
            print("Default configs for brokers in the cluster are:")
            _print(configs, lambda source: source == 3)
    return 0


async def _broker_configs(
    admin: Admin, brokers: dict[int, tuple[str, int]], name: str, security: ClientSecurity
) -> list[tuple[str, str | None, int, bool]]:
    """A broker's configs are described by that broker (as Kafka's Admin client asks the
    broker itself); the default broker's by any."""
    from odradek.client.admin import BROKER_RESOURCE, Admin
    from odradek.client.connection import BrokerConnection

    endpoint = brokers.get(int(name)) if name.isdigit() else None
    if endpoint is None:
        return await admin.describe_configs(BROKER_RESOURCE, name)
    conn = await BrokerConnection.open(f"{endpoint[0]}:{endpoint[1]}", client_id="odradek-cli",
                                       security=security)
    try:
        return await Admin(conn).describe_configs(BROKER_RESOURCE, name)
    finally:
        await conn.close()


def _print(configs: list[tuple[str, str | None, int, bool]], shown: Any) -> None:
    for name, value, source, sensitive in sorted(configs):
        if shown(source):
            text = "null" if sensitive or value is None else value
            print(f"  {name}={text} sensitive={str(sensitive).lower()} "
                  f"source={SOURCES.get(source, str(source))}")
