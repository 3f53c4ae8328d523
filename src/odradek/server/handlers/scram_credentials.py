"""DescribeUserScramCredentials (key 50, v0) and AlterUserScramCredentials (key 51, v0).

How it works: KIP-554, as Kafka's ``ZkAdminManager`` answers it. The client salts and
hashes the password (``salted_password`` = PBKDF2 of it, with the salt and iterations it
sends); the broker derives the stored and server keys from it
(:func:`odradek.security.sasl.credential_from_salted`) and stores the credential in the
user's entity config (:mod:`odradek.cluster.user_credentials`, ``/config/users/<user>``),
so the password never reaches the broker. Every user is answered on its own, with the
first problem found: an empty name or salt or password, or iterations outside 4096-16384
(UNACCEPTABLE_CREDENTIAL), an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), a user and
mechanism altered twice in one request (DUPLICATE_RESOURCE), a deletion of a credential
that does not exist (RESOURCE_NOT_FOUND). Describe lists the mechanisms and iterations of
the users asked (all users with credentials when none are named); a user without
credentials is RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE. With an
authorizer, Describe needs Describe on the cluster and Alter needs Alter on it
(CLUSTER_AUTHORIZATION_FAILED: for Alter, every user's result), as Kafka's KafkaApis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from odradek.cluster.user_credentials import (
    delete_scram_credential,
    list_scram_users,
    read_user_config,
    set_scram_credential,
)
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext, bind
from odradek.security.acl import AclOperation
from odradek.security.sasl import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MIN_ITERATIONS,
    SCRAM_TYPES,
    credential_from_salted,
)
from odradek.server.authorization import require_on_cluster
from odradek.server.handlers._entities import ZERO_THROTTLE, make, response_module

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

__all__ = ["MECHANISM_TYPES", "register_scram_credentials"]

MECHANISM_TYPES: Final = {t: name for name, t in SCRAM_TYPES.items()}
_TYPE_OF: Final = SCRAM_TYPES
T = TypeVar("T")


def register_scram_credentials(registry: HandlerRegistry, services: BrokerServices) -> None:
    registry.register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0,
                      bind(describe_user_scram_credentials, services))
    registry.register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0,
                      bind(alter_user_scram_credentials, services))


async def _off_loop(services: BrokerServices, fn: Callable[..., T], *args: Any) -> T:
    """Store calls block in cluster mode (ZooKeeper): off the event loop there."""
    if services.metadata.remote:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


async def describe_user_scram_credentials(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.DESCRIBE)
    m = response_module("describe_user_scram_credentials", ctx.api_version)
    store = services.metadata.store
    everyone = await _off_loop(services, list_scram_users, store)
    results = []
    if not request.users:
        for user in sorted(everyone):
            results.append(_describe_result(m, user, everyone[user]))
    else:
        names = [u.name for u in request.users]
        for user in dict.fromkeys(names):
            if names.count(user) > 1:
                results.append(make(
                    m.DescribeUserScramCredentialsResult, user=user,
                    error_code=ErrorCode.duplicate_resource,
                    error_message="Cannot describe SCRAM credentials for the same user twice "
                    "in a single request", credential_infos=()))
            elif user not in everyone:
                results.append(make(
                    m.DescribeUserScramCredentialsResult, user=user,
                    error_code=ErrorCode.resource_not_found,
                    error_message=f"Attempt to describe a user credential that does not "
                    f"exist: {user}", credential_infos=()))
            else:
                results.append(_describe_result(m, user, everyone[user]))
    return make(m.DescribeUserScramCredentialsResponse, throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _describe_result(m: Any, user: str, mechanisms: dict[str, int]) -> Any:
    infos = tuple(make(m.CredentialInfo, mechanism=_TYPE_OF[mech], iterations=iterations)
                  for mech, iterations in sorted(mechanisms.items()))
    return make(m.DescribeUserScramCredentialsResult, user=user, error_code=ErrorCode.none,
                error_message=None, credential_infos=infos)


def _upsertion_problem(u: Any) -> tuple[ErrorCode, str] | None:
    if not u.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if u.mechanism not in MECHANISM_TYPES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if u.iterations < SCRAM_MIN_ITERATIONS:
        return (ErrorCode.unacceptable_credential,
                f"Too few iterations: {u.iterations} (at least {SCRAM_MIN_ITERATIONS})")
    if u.iterations > SCRAM_MAX_ITERATIONS:
        return (ErrorCode.unacceptable_credential,
                f"Too many iterations: {u.iterations} (at most {SCRAM_MAX_ITERATIONS})")
    if not u.salt:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    if not u.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return None


#: The longest user a credential is stored for: Kafka's longest STRING (a SASL/SCRAM
#: client's user name can be no longer in practice either). The name is a ZooKeeper node
#: name (``/config/users/<user>``, URL-encoded: up to 3 bytes a byte); a megabyte one is a
#: request ZooKeeper drops the broker's connection for (``jute.maxbuffer``). Refused as Kafka
#: refuses an empty name: UNACCEPTABLE_CREDENTIAL.
MAX_USER_NAME_BYTES = 32767


async def alter_user_scram_credentials(
    services: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    require_on_cluster(services.authorizer, ctx, AclOperation.ALTER)
    m = response_module("alter_user_scram_credentials", ctx.api_version)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    users: list[str] = []
    seen: dict[tuple[str, int], int] = {}
    for item in (*request.deletions, *request.upsertions):
        users.append(item.name)
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for (user, _mechanism), count in seen.items():
        if count > 1:
            fail(user, ErrorCode.duplicate_resource,
                 "A user credential cannot be altered twice in the same request")
    for user in users:
        if len(user.encode()) > MAX_USER_NAME_BYTES:
            fail(user, ErrorCode.unacceptable_credential,
                 f"Username is longer than {MAX_USER_NAME_BYTES} bytes")
    for d in request.deletions:
        if not d.name:
            fail(d.name, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif d.mechanism not in MECHANISM_TYPES:
            fail(d.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    for u in request.upsertions:
        problem = _upsertion_problem(u)
        if problem is not None:
            fail(u.name, *problem)
    store = services.metadata.store
    for d in request.deletions:
        if d.name in errors:
            continue
        existing = await _off_loop(services, read_user_config, store, d.name)
        if MECHANISM_TYPES[d.mechanism] not in existing:
            fail(d.name, ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist")
    for d in request.deletions:
        if d.name not in errors:
            await _off_loop(services, delete_scram_credential, store, d.name,
                            MECHANISM_TYPES[d.mechanism])
    for u in request.upsertions:
        if u.name not in errors:
            mechanism = MECHANISM_TYPES[u.mechanism]
            credential = credential_from_salted(mechanism, bytes(u.salted_password),
                                                bytes(u.salt), int(u.iterations))
            await _off_loop(services, set_scram_credential, store, u.name, mechanism,
                            credential.to_text())
    results = tuple(
        make(m.AlterUserScramCredentialsResult, user=user,
             error_code=errors[user][0] if user in errors else ErrorCode.none,
             error_message=errors[user][1] if user in errors else None)
        for user in dict.fromkeys(users))
    return make(m.AlterUserScramCredentialsResponse, throttle_time=ZERO_THROTTLE,
                results=results)
