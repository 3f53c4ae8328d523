"""Map errors raised below the server (storage, cluster) to Kafka error codes.

Storage and cluster errors name their Kafka error code in ``kafka_error`` (upper-case, as
in Kafka's ``Errors`` enum); this is the one place that turns the name into kio's
:class:`ErrorCode`. Anything else is an internal failure: logged with its traceback and
answered UNKNOWN_SERVER_ERROR, never a crash.
"""

from __future__ import annotations

import logging

from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def code_of(name: str) -> ErrorCode:
    return ErrorCode[name.lower()]


def error_code_for(exc: BaseException, context: str = "") -> tuple[ErrorCode, str]:
    if isinstance(exc, KafkaError):
        return exc.code, str(exc)
    name = getattr(exc, "kafka_error", None)
    if isinstance(name, str):
        try:
            return code_of(name), str(exc)
        except KeyError:
            pass
    log.error("unexpected error %s", context, exc_info=exc)
    return ErrorCode.unknown_server_error, f"internal error: {type(exc).__name__}"
