"""One ``odradek serve`` for a benchmark, and the CPU time a process has used.

How it works: :func:`odradek_serve` starts the broker of this checkout's venv in a fresh
data directory with the given ``--override`` settings (the listeners among them, on ports
from :func:`free_port`), waits until ``wait_port`` accepts connections (at most 30 s, or
until the process dies), and on exit terminates it and removes the directory.
:func:`cpu_seconds` reads a process's utime + stime from ``/proc/<pid>/stat``: on a shared
machine it moves less than the wall clock, so benchmarks report the broker's CPU per
record or per connection beside their rates.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A port on 127.0.0.1 free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds (user + system) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@contextmanager
def odradek_serve(
    overrides: Sequence[str], wait_port: int, data_prefix: str, source: Path | None = None,
    wrapper: Sequence[str] = (), start_timeout_s: float = START_TIMEOUT_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """``odradek serve --log-level warning`` with ``--override`` for each of ``overrides``
    and ``log.dirs`` in a temporary directory named ``data_prefix...``; yields the process
    once ``wait_port`` accepts connections. With ``source`` (another tree's ``src/``, as
    bench/peers.py's ``odradek_at`` makes), that tree's code runs, first on the path;
    ``wrapper`` is a command the broker runs under (valgrind's, with its options)."""
    data = Path(tempfile.mkdtemp(prefix=data_prefix))
    venv = ROOT / ".venv" / "bin"
    # under a wrapper the interpreter is named (valgrind runs executables, not scripts)
    interpreter = [*wrapper, str(venv / "python")] if wrapper else []
    # another tree runs through a launcher every tree can use (its own header says why)
    cli = (str(venv / "odradek") if source is None
           else str(Path(__file__).with_name("odradek_cli.py")))
    if source is not None and not wrapper:
        interpreter = [str(venv / "python")]
    command = [*interpreter, cli, "serve", "--log-level", "warning"]
    for override in (*overrides, f"log.dirs={data}"):
        command += ["--override", override]
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    proc = subprocess.Popen(command, env=env)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", wait_port), 1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the broker did not start") from None
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
