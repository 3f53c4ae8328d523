"""The child process that compiles and resolves consumer groups' regular expressions,
and the coordinator's asyncio client of it (Kafka runs the resolution on the group
coordinator's executor threads; a Python thread would hold the GIL while RE2 compiles).

How it works:

- The child (``python -m odradek.coordinator.regex_worker``) reads one JSON request a
  line on stdin and writes one JSON answer a line on stdout:
  ``{"validate": regex}`` -> ``{"error": message or null}`` and
  ``{"resolve": [regex...], "topics": [name...]}`` -> ``{"topics": {regex: [name...]}}``
  (:mod:`odradek.coordinator.consumer_regex`). It imports nothing else of the broker,
  and runs :data:`NICENESS` below it, so that on a busy machine the broker's loop gets
  the CPU first.
- :class:`RegexWorker` starts it on first use, sends one request at a time (an
  ``asyncio.Lock``), and gives each answer a budget of the child's CPU time:
  :data:`VALIDATE_TIMEOUT_S` for a validation, :data:`RESOLVE_TIMEOUT_S` for a
  resolution. The budget is of CPU, not of the wall clock, so that a worker starved of
  CPU (a loaded machine: it runs niced) is waited for rather than judged (read from
  ``/proc/<pid>/stat``; where that cannot be read, the wall clock's time counts), up to
  :data:`WALL_LIMIT_FACTOR` times the budget on the wall clock. A request past either
  kills the child (the next request starts a new one) and raises :class:`RegexTimeout`;
  the coordinator answers a validation that timed out INVALID_REGULAR_EXPRESSION (kept
  as the expression's verdict only when it spent its CPU budget: a starved worker's is
  not), and keeps a group's last resolution when its refresh timed out (as Kafka does
  when the resolution fails), retrying it after the refresh interval. The coordinator
  keeps two of them, one compiling and one resolving, so that a compile (a member
  waiting on its heartbeat) never queues behind a slow resolution.
- Answers of validations are kept (the newest :data:`VALIDATED_KEPT`, at most
  :data:`VALIDATED_KEPT_CHARS` characters of expressions), so a regex already judged
  costs no round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import IO, Any

__all__ = ["RESOLVE_TIMEOUT_S", "VALIDATE_TIMEOUT_S", "RegexTimeout", "RegexWorker"]

log = logging.getLogger(__name__)

VALIDATE_TIMEOUT_S = 2.0
"""How long compiling one SubscribedTopicRegex may take before it is refused."""
RESOLVE_TIMEOUT_S = 30.0
"""How long resolving a group's expressions against the cluster's topics may take."""
VALIDATED_KEPT = 4096
"""Validation answers kept (the newest) ..."""
VALIDATED_KEPT_CHARS = 4 * 1024 * 1024
"""... and at most this many characters of expressions among them."""
WALL_LIMIT_FACTOR = 15
"""A request is given up after this many times its CPU budget on the wall clock, however
little CPU the child got."""
NICENESS = 10
"""The child runs this much nicer than the broker (``os.nice``)."""
STOP_WAIT_S = 2.0
"""The broker's stop waits this long for a killed child to be reaped."""
_LINE_LIMIT = 64 * 1024 * 1024  # an answer line: every topic name, a few times over


class RegexTimeout(Exception):
    """The worker did not answer in time (it was killed); ``cpu_spent``: whether it
    spent its CPU budget (else it was starved past the wall clock's limit)."""

    def __init__(self, message: str, cpu_spent: bool = True) -> None:
        super().__init__(message)
        self.cpu_spent = cpu_spent


def _cpu_s(pid: int) -> float | None:
    """The CPU time (user + system) a process has spent, None when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class RegexWorker:
    """The coordinator's handle on the regex child process (module docstring)."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._validated: OrderedDict[str, str | None] = OrderedDict()
        self._validated_chars = 0
        # requests sent to a child, by kind ("validate", "resolve"), children started, and
        # times a request's deadline passed on the wall clock with its CPU budget unspent
        self.requests: Counter[str] = Counter()
        self.started = 0
        self.overdue = 0

    @property
    def busy(self) -> bool:
        """Whether a request is under way or waiting for one."""
        return self._lock.locked()

    @property
    def pid(self) -> int | None:
        """The running child's process id, None when none runs."""
        proc = self._proc
        return None if proc is None or proc.returncode is not None else proc.pid

    async def validate(self, regex: str) -> str | None:
        """Kafka's INVALID_REGULAR_EXPRESSION message for ``regex``, None when valid."""
        if regex in self._validated:
            self._validated.move_to_end(regex)
            return self._validated[regex]
        try:
            answer = await self._ask({"validate": regex}, VALIDATE_TIMEOUT_S)
        except RegexTimeout as exc:
            error: str | None = (
                f"SubscribedTopicRegex `{regex[:200]}` is not a valid regular expression: "
                f"not compiled within {VALIDATE_TIMEOUT_S:g} s.")
            if not exc.cpu_spent:
                return error  # the machine's verdict, not the expression's: not kept
        else:
            error = answer.get("error")
        if regex not in self._validated:
            self._validated[regex] = error
            self._validated_chars += len(regex)
        while self._validated and (len(self._validated) > VALIDATED_KEPT
                                   or self._validated_chars > VALIDATED_KEPT_CHARS):
            oldest, _ = self._validated.popitem(last=False)
            self._validated_chars -= len(oldest)
        return error

    async def resolve(self, regexes: Iterable[str], topics: Iterable[str]
                      ) -> dict[str, list[str]]:
        """The topics each expression matches (raises :class:`RegexTimeout`)."""
        answer = await self._ask({"resolve": sorted(regexes), "topics": list(topics)},
                                 RESOLVE_TIMEOUT_S)
        resolved: dict[str, list[str]] = answer["topics"]
        return resolved

    async def _ask(self, request: dict[str, Any], budget_s: float) -> dict[str, Any]:
        async with self._lock:
            proc = await self._started()
            assert proc.stdin is not None and proc.stdout is not None
            self.requests[next(iter(request))] += 1
            cpu_before = _cpu_s(proc.pid)
            loop = asyncio.get_running_loop()
            started = loop.time()
            reading = asyncio.ensure_future(self._exchange(proc, request))
            try:
                while True:
                    done, _ = await asyncio.wait({reading}, timeout=budget_s / 4)
                    if done:
                        break
                    wall = loop.time() - started
                    cpu_now = _cpu_s(proc.pid)
                    cpu = (wall if cpu_before is None or cpu_now is None
                           else cpu_now - cpu_before)
                    if cpu >= budget_s:
                        raise RegexTimeout(f"{cpu:.1f} s of CPU")
                    if wall >= budget_s * WALL_LIMIT_FACTOR:
                        raise RegexTimeout(f"{wall:.0f} s with {cpu:.1f} s of CPU (starved)",
                                           cpu_spent=False)
                    if wall >= budget_s:
                        self.overdue += 1
                line = reading.result()
            except ConnectionError as exc:
                await self._kill()
                raise RegexTimeout(str(exc) or "the regex worker's pipe broke") from exc
            except BaseException:
                reading.cancel()
                await self._kill()
                raise
            if not line:
                await self._kill()
                raise RegexTimeout("the regex worker exited")
            answer: dict[str, Any] = json.loads(line)
            return answer

    @staticmethod
    async def _exchange(proc: asyncio.subprocess.Process, request: dict[str, Any]) -> bytes:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        await proc.stdin.drain()
        return await proc.stdout.readline()

    async def _started(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "odradek.coordinator.regex_worker",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT)
            self.started += 1
            log.info("regex worker started (pid %d)", self._proc.pid)
        return self._proc

    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        log.warning("regex worker (pid %d) killed: no answer in time", proc.pid)
        proc.kill()
        await proc.wait()

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def stop(self) -> None:
        """Kill the child and reap it on this loop (the broker's stop): a child only
        killed leaves its transport to be collected after the loop has closed, which
        asyncio reports as an error ("Event loop is closed")."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)

    def close_now(self) -> None:
        """Kill the child without waiting (shutdown outside a coroutine)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.kill()


def serve(inp: IO[str], out: IO[str]) -> None:
    """The child's loop (module docstring)."""
    from odradek.coordinator.consumer_regex import regex_error, resolve

    for line in inp:
        request = json.loads(line)
        if "validate" in request:
            answer: dict[str, Any] = {"error": regex_error(request["validate"])}
        else:
            answer = {"topics": resolve(request["resolve"], request["topics"])}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    # below the broker: a costly expression takes CPU from the broker's loop last
    os.nice(NICENESS)
    serve(sys.stdin, sys.stdout)
