"""Process resource limits the broker raises for itself at start.

How it works: a broker holds a descriptor per connection and per open segment file (plus
one per mapped index; see :mod:`odradek.storage.segment`). The usual soft RLIMIT_NOFILE is
1,024 while the hard limit is often far higher (524,288 with systemd), so, like Kafka's
packaging does with ``LimitNOFILE`` / ``ulimit -n``, the broker raises its soft limit to the
hard limit at start and logs both. A limit it cannot raise is logged, never fatal: running
out of descriptors fails single operations (``storage/dir_failure.py``), it does not take a
log dir offline.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# Some kernels report RLIM_INFINITY as the hard limit but refuse it for NOFILE; cap there.
_NOFILE_CEILING = 1 << 20


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the (soft, hard) limits now
    in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, _NOFILE_CEILING)
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.debug("open files limit: soft %s, hard %s", _show(soft), _show(hard))
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning(
            "open files limit: soft %s, hard %s; could not raise the soft limit: %s",
            _show(soft), _show(hard), exc,
        )
        return soft, hard
    log.info(
        "open files limit: soft %s raised to %s (hard %s)", _show(soft), _show(target),
        _show(hard),
    )
    return target, hard


def _show(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
