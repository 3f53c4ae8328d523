"""Helpers for the web console tests: run ``odradek console`` as a subprocess and drive a
headless Chromium (Debian's ``chromium`` + ``chromium-driver``, installed by
``scripts/bootstrap --test``) with Selenium; log in (browser or httpx) and find a page's
CSRF token."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests._deadlines import describe, expired
from tests.interop._broker import REPO, free_port, odradek_executable, port_open

T = TypeVar("T")
#: Screenshots kept by the browser tests (printed by the tests; override with the variable).
ARTIFACTS = Path(os.environ.get("ODRADEK_ARTIFACTS", REPO / "tmp" / "artifacts")) / "webconsole"
#: The console's login password in the tests (written to a 0600 file, never an argument).
PASSWORD = "correct horse battery staple"
_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


@contextmanager
def running_console(bootstrap: str, *extra: str, password: str | None = None,
                    log: Path | None = None, timeout: float = 30.0) -> Iterator[str]:
    """``odradek console`` on a free port; yields its base URL. With ``password`` it logs
    in with it (``--password-file``); without, and without a ``--password-file`` in
    ``extra``, it runs ``--no-login`` on loopback (as ``bench/webconsole.py`` measures it).
    Its output goes to ``log`` (default: a temporary file, shown if it fails to start)."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        args = list(extra)
        if password is not None:
            secret = Path(tmp) / "console.password"
            secret.touch(0o600)
            secret.write_text(password + "\n")
            args += ["--password-file", str(secret)]
        elif "--password-file" not in args:
            args.append("--no-login")
        out_path = log or Path(tmp) / "console.log"
        with out_path.open("wb") as out:
            proc = subprocess.Popen(
                [str(odradek_executable()), "console", "--bootstrap-server", bootstrap,
                 "--port", str(port), *args],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            started = time.monotonic()
            while not port_open("127.0.0.1", port):
                if proc.poll() is not None or expired(started, timeout):
                    raise AssertionError(f"odradek console did not start: rc={proc.poll()}\n"
                                         f"{out_path.read_text(errors='replace')}")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def csrf_token(html: str) -> str:
    """The CSRF token of a console page's forms."""
    found = _CSRF.search(html)
    assert found, "the page has no CSRF token"
    return found.group(1)


def login(http: Any, password: str = PASSWORD) -> None:
    """Log an httpx client (or Starlette's TestClient) in; fails if it did not work."""
    r = http.post("/login", data={"password": password, "next": "/topics"},
                  follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/topics", (r.status_code, r.text)


def browser_login(driver: Any, url: str, password: str = PASSWORD) -> None:
    """Log the browser in through the login page."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_for("the login page", lambda: driver.find_element(By.ID, "password")).send_keys(
        password)
    driver.find_element(By.ID, "login").click()
    wait_for("the overview after logging in",
             lambda: driver.find_elements(By.ID, "logout"))


def chromium_driver(*arguments: str) -> Any:
    """A headless Chromium (with extra command-line ``arguments``); a missing browser is
    an error naming how to install it."""
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
                "--window-size=1280,900", *arguments):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 15.0) -> T:
    """Poll ``check`` until it returns something truthy, or fail naming ``what``."""
    started = time.monotonic()
    last: Exception | None = None
    while not expired(started, timeout):
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the element is not there yet, a stale reference
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} after {describe(started, timeout)}"
                         + (f" (last error: {last})" if last else ""))
