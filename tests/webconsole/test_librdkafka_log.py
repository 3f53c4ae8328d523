"""``odradek console`` with a broker that goes away: librdkafka's complaints reach the
console's stderr through logging (the ``odradek.webconsole.librdkafka`` logger, in the CLI's
log format), never as librdkafka's own raw ``%3|<time>|FAIL|...`` lines (issue 19)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests._deadlines import expired
from tests.interop._broker import REPO, free_port, odradek_executable, port_open, start_broker
from tests.webconsole._console import PASSWORD, login

pytestmark = pytest.mark.interop

RAW_LINE = re.compile(r"^%\d\|", re.MULTILINE)
LOGGED_FAIL = re.compile(r"(ERROR|WARNING|CRITICAL) odradek\.webconsole\.librdkafka: FAIL ")


def _wait(what: str, check: object, timeout: float) -> None:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        if expired(started, timeout):
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_broker_going_away_is_logged_not_printed_raw(tmp_path: Path) -> None:
    err_path = tmp_path / "console.stderr"
    port = free_port()
    secret = tmp_path / "console.password"
    secret.write_text(PASSWORD + "\n")
    with start_broker(tmp_path / "broker") as broker, err_path.open("wb") as err:
        console = subprocess.Popen(
            [str(odradek_executable()), "console", "--bootstrap-server", broker.bootstrap,
             "--port", str(port), "--password-file", str(secret)],
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
        try:
            _wait("the console to listen", lambda: port_open("127.0.0.1", port)
                  or console.poll() is not None, 30)
            assert console.poll() is None, err_path.read_text()
            http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
            login(http)
            # the console uses the broker (its admin client connects) ...
            page = http.get("/")
            assert page.status_code == 200 and broker.bootstrap in page.text
            broker.stop()  # ... which then goes away
            down_since = time.monotonic()
            _wait("librdkafka's complaint in the console's log",
                  lambda: LOGGED_FAIL.search(err_path.read_text(errors="replace")), 60)
            # the console still answers, with the reason, and stays up
            page = http.get("/")
            http.close()
            assert page.status_code == 400 and "failed" in page.text
        finally:
            console.terminate()
            try:
                console.wait(15)
            except subprocess.TimeoutExpired:
                console.kill()
                console.wait()
    down_s = time.monotonic() - down_since
    text = err_path.read_text(errors="replace")
    assert LOGGED_FAIL.search(text), text
    assert "Connection refused" in text or "Disconnected" in text, text
    assert not RAW_LINE.search(text), text
    assert "Traceback" not in text, text
    # librdkafka repeats its connect failure ~20 times a second; the log says it once per 30 s
    fails = Counter(line.split(": ", 1)[1] for line in text.splitlines()
                    if LOGGED_FAIL.search(line))
    assert max(fails.values()) <= 1 + down_s // 30, (fails, down_s)
