"""Helpers for the web console tests: run ``odradek console`` as a subprocess and drive a
headless Chromium (Debian's ``chromium`` + ``chromium-driver``, installed by
``scripts/bootstrap --test``) with Selenium."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.interop._broker import REPO, free_port, odradek_executable, port_open

T = TypeVar("T")
#: Screenshots kept by the browser tests (printed by the tests; override with the variable).
ARTIFACTS = Path(os.environ.get("ODRADEK_ARTIFACTS", REPO / "tmp" / "artifacts")) / "webconsole"


@contextmanager
def running_console(bootstrap: str, *extra: str, timeout: float = 30.0) -> Iterator[str]:
    """``odradek console`` on a free port; yields its base URL."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [str(odradek_executable()), "console", "--bootstrap-server", bootstrap,
         "--port", str(port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise AssertionError(f"odradek console did not start: rc={proc.poll()}\n{out}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def chromium_driver() -> Any:
    """A headless Chromium; a missing browser is an error naming how to install it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        raise AssertionError("the browser tests need Debian's chromium and chromium-driver: "
                             "run scripts/bootstrap --test (or apt-get install -y chromium "
                             "chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 15.0) -> T:
    """Poll ``check`` until it returns something truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the element is not there yet, a stale reference
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last
                                                             else ""))
