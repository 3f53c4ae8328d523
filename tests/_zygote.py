"""Brokers and commands forked from a process that has imported them already (issue 51).

A broker's start in the tests was 0.76 s of CPU by the time it served, 0.55 s of it
Python importing the server's modules (spread over some 170 of them, no single part
worth deferring), and a whole run starts about 240 brokers (`start_broker`, clusters'
restarts included). Forked from a process that has done those imports, the same start
is 0.21 s of CPU and of wall time.

How it works: the first broker a test process starts brings up a zygote, ``python -m
tests._zygote`` with the test process's environment, which imports what ``odradek
serve`` imports and then waits for requests, one JSON line each on its stdin: the
command line, the directory, the environment, the files for stdout and stderr, whether
to start a session. For each it forks; the child becomes the command as a fresh process
would: its own session (so a process-group kill reaches its children too), stdin from
/dev/null, stdout and stderr to the files, the directory and environment it was given,
``sys.argv`` set, then the ``odradek`` entry point, and it leaves the interpreter the
usual way (atexit handlers, flushes, non-daemon threads joined). The zygote answers each
request with the child's pid and reaps its children as they exit (SIGCHLD), reporting
each exit status; :class:`ForkedProcess` is the test side's ``subprocess.Popen`` for
such a child (``pid``, ``poll``, ``wait``, ``returncode``, signals), so a broker killed
-9 is a real process killed -9, and a ``wait()`` that returns means it was reaped.

The tests' ``odradek`` commands that capture their output (:func:`run`, in place of
``subprocess.run``) are forked the same way, their stdin, stdout and stderr files in a
temporary directory (a command's start was about 0.3 s of CPU, some 360 a run).

What a fork does not give, and where a broker or command is still started by
``subprocess``:
an environment whose ``PYTHON*`` variables differ from the zygote's (its ``sys.path``
and interpreter settings were fixed at its start), a command line that is not the
``odradek`` console script (``prlimit`` before it), and ``ODRADEK_TEST_FORK=0`` for the
whole run. A test about a command's own start-up (what it imports) runs it directly.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
#: set to 0 to start every broker with subprocess.Popen
ENV = "ODRADEK_TEST_FORK"


# ============================================================== the zygote's side
def _serve() -> dict[str, Any] | None:
    """The zygote's loop; returns the request in a forked child, None at the end (stdin
    closed: the test process is gone)."""
    sel = selectors.DefaultSelector()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffered = b""

    def answer(message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(1, data):]

    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    answer({"exited": pid, "status": status})
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return None
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                request: dict[str, Any] = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sel.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return request
                answer({"pid": pid})


def _become(request: dict[str, Any]) -> int:
    """In the forked child: set up what a fresh process would have, run the command."""
    if request["session"]:
        os.setsid()
    inp = os.open(request["stdin"], os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd, target in ((inp, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    from odradek.cli._entry import main

    return main()


def _zygote_main() -> None:
    # as the console script: its directory first on the path, not the repository's
    sys.path[0] = str(VENV_BIN)
    from odradek.cli import _entry

    for name in _entry.UNUSED_OPTIONAL_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    for module in ("odradek.cli.main", "odradek.server.broker"):  # what `serve` imports
        importlib.import_module(module)

    request = _serve()
    if request is None:
        return
    sys.exit(_become(request))


# ============================================================== the test process's side
def _python_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of an environment is fixed at an interpreter's start."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k.startswith("LD_")}


class ForkedProcess:
    """A child of the zygote, as ``subprocess.Popen`` shows a child of one's own."""

    def __init__(self, zygote: Zygote, pid: int, argv: Sequence[str]) -> None:
        self._zygote, self.pid, self.args = zygote, pid, list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._zygote.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's handle on its zygote (module docstring)."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        python = VENV_BIN / "python"
        self._proc = subprocess.Popen(
            [str(python if python.exists() else sys.executable), "-m", "tests._zygote"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(REPO), env=self.env,
            start_new_session=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._lock = threading.Lock()  # one request at a time: answers come in order
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._statuses: dict[int, int] = {}
        self.gone = False
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                        name="zygote-reader", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            message = json.loads(line)
            with self._changed:
                if "pid" in message:
                    # a pid the system gave again: the status of its earlier child is old
                    self._statuses.pop(message["pid"], None)
                    self._pids.append(message["pid"])
                else:
                    self._statuses[message["exited"]] = message["status"]
                self._changed.notify_all()
        with self._changed:
            self.gone = True
            self._changed.notify_all()

    def accepts(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """Whether a fork gives what a new process would for this command."""
        return (not self.gone and bool(argv) and Path(argv[0]) == VENV_BIN / "odradek"
                and _python_env(env) == _python_env(self.env))

    def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdout: Path,
              stderr: Path, session: bool, stdin: Path | None = None) -> ForkedProcess:
        request = {"argv": list(argv), "cwd": cwd, "env": dict(env), "stdout": str(stdout),
                   "stderr": str(stderr), "session": session,
                   "stdin": str(stdin) if stdin is not None else os.devnull}
        with self._lock:
            self._stdin.write((json.dumps(request) + "\n").encode())
            self._stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._pids or self.gone, 30):
                    raise RuntimeError("the test zygote did not answer within 30 s")
                if not self._pids:
                    raise RuntimeError("the test zygote exited")
                pid = self._pids.pop(0)
        return ForkedProcess(self, pid, argv)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit code (negative: the signal that ended it) once reaped, None
        if it runs still after ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._statuses or self.gone, timeout)
            if pid in self._statuses:
                return os.waitstatus_to_exitcode(self._statuses[pid])
            if self.gone and not Path(f"/proc/{pid}").exists():
                return -signal.SIGKILL  # its status went with the zygote
            return None

    def close(self) -> None:
        self._stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def run(argv: Sequence[str], *, input: str | None = None,
        env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, input=input, capture_output=True, text=True, env=env,
    cwd=cwd, timeout=timeout, check=check)`` for an ``odradek`` command, forked from the
    zygote when it can give what a new process would (:meth:`Zygote.accepts`): its
    stdin, stdout and stderr are files instead of pipes (none of them a terminal either
    way)."""
    child_env = dict(env) if env is not None else dict(os.environ)
    forks = zygote()
    if forks is None or not forks.accepts(argv, child_env):
        return subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              env=child_env, cwd=cwd, timeout=timeout, check=check)
    with tempfile.TemporaryDirectory(prefix="odradek-run-") as tmp:
        files = Path(tmp)
        stdin = files / "stdin"
        stdin.write_text(input or "")
        child = forks.spawn(argv, cwd=str(cwd or os.getcwd()), env=child_env,
                            stdout=files / "stdout", stderr=files / "stderr",
                            session=False, stdin=stdin)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(
                list(argv), timeout or 0, output=_text(files / "stdout"),
                stderr=_text(files / "stderr")) from None
        done = subprocess.CompletedProcess(list(argv), code, _text(files / "stdout"),
                                           _text(files / "stderr"))
    if check:
        done.check_returncode()
    return done


def _text(path: Path) -> str:
    """A captured stream as ``text=True`` gives it (universal newlines)."""
    data = path.read_bytes().decode(errors="strict") if path.exists() else ""
    return data.replace("\r\n", "\n").replace("\r", "\n")


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote | None:
    """This process's zygote, started on first use; None when ``ODRADEK_TEST_FORK=0``."""
    global _zygote
    if os.environ.get(ENV, "1") == "0":
        return None
    with _zygote_lock:
        if _zygote is None or _zygote.gone:
            _zygote = Zygote()
        return _zygote


def close_zygote() -> None:
    """Stop this process's zygote (the tests' end); the brokers it forked are stopped by
    their owners before."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


atexit.register(close_zygote)  # after the brokers' own atexit kill (registered later)

if __name__ == "__main__":
    _zygote_main()
