"""The console's door (issue 49): login, CSRF tokens, the Origin and Host checks and
read-only mode, through Starlette's test client (the app in process, httpx underneath)
against a real broker, and the real ``odradek console`` command's refusals to start.

The browser's side of the same door (a forged cross-site form, DNS rebinding, logging in
and out in Chromium) is in ``test_browser.py``."""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from odradek.webconsole.app import create_app
from odradek.webconsole.guard import Guard
from tests.interop._broker import REPO, odradek_executable, start_broker
from tests.webconsole._console import PASSWORD, csrf_token, login, running_console

pytestmark = pytest.mark.interop

TOPIC = "guarded"


def _topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).topics)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_broker(Path(tmp_path_factory.mktemp("console-guard"))) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        yield broker.bootstrap


def _client(bootstrap: str, **guard: object) -> TestClient:
    options: dict[str, object] = {"password": PASSWORD.encode(),
                                  "allowed_hosts": frozenset({"testserver"})}
    options.update(guard)
    return TestClient(create_app(bootstrap, guard=Guard(**options)))  # type: ignore[arg-type]


def test_logged_out_sees_only_the_login_page(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        for path in ("/", "/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/messages",
                     "/groups", "/metrics"):
            r = http.get(path, follow_redirects=False)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/login?next="), r.headers
        for path in (f"/api/topics/{TOPIC}/messages?partition=0&offset=0",
                     "/api/groups/g/lag", "/api/metrics"):
            r = http.get(path)
            assert r.status_code == 401 and r.json() == {"error": "log in first"}, path
        page = http.get("/")
        assert page.status_code == 200 and 'name="password"' in page.text
        assert bootstrap not in page.text and TOPIC not in page.text
        assert 'href="/topics"' not in page.text


def test_wrong_password_is_refused(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        r = http.post("/login", data={"password": "guess", "next": "/"},
                      follow_redirects=False)
        assert r.status_code == 401 and "wrong password" in r.text
        assert "set-cookie" not in r.headers
        assert http.get("/topics", follow_redirects=False).status_code == 303


def test_login_sets_a_strict_http_only_cookie_and_logout_ends_it(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        r = http.post("/login", data={"password": PASSWORD, "next": f"/topics/{TOPIC}"},
                      follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"/topics/{TOPIC}"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/" in cookie
        assert "Secure" not in cookie  # plain HTTP here; over TLS it is Secure
        page = http.get(f"/topics/{TOPIC}")
        assert page.status_code == 200 and TOPIC in page.text
        assert http.get(f"/api/topics/{TOPIC}/messages?partition=0&offset=0").json() == {
            "records": []}
        stolen = dict(http.cookies)
        token = csrf_token(page.text)
        assert http.post("/logout", data={"csrf_token": token},
                         follow_redirects=False).status_code == 303
        assert http.get("/topics", follow_redirects=False).status_code == 303
    # the old cookie is dead on the server too, not only forgotten by this client
    with _client(bootstrap) as other:
        other.cookies.update(stolen)
        assert other.get("/topics", follow_redirects=False).status_code == 303


def test_login_goes_back_only_to_a_local_path(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
            r = http.post("/login", data={"password": PASSWORD, "next": evil},
                          follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == "/", evil


def test_a_post_without_a_valid_token_is_refused_and_changes_nothing(bootstrap: str) -> None:
    with _client(bootstrap) as http, _client(bootstrap) as other:
        login(http)
        login(other)
        token = csrf_token(http.get("/topics").text)
        foreign = csrf_token(other.get("/topics").text)
        assert token != foreign
        for data in ({}, {"csrf_token": ""}, {"csrf_token": "x" * len(token)},
                     {"csrf_token": foreign}):
            r = http.post("/topics", data={"name": "forged", "partitions": "1", **data})
            assert r.status_code == 403 and "CSRF" in r.text, data
            r = http.post(f"/topics/{TOPIC}/delete", data={"confirm": TOPIC, **data})
            assert r.status_code == 403, data
        # a right token from another origin (a page elsewhere posting with a leaked token)
        r = http.post("/topics", data={"name": "forged", "partitions": "1", "csrf_token": token},
                      headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "origin" in r.text
        r = http.post("/topics", data={"name": "forged", "partitions": "1", "csrf_token": token},
                      headers={"Referer": "http://evil.example/page"})
        assert r.status_code == 403
        r = http.post("/topics", data={"name": "forged", "partitions": "1", "csrf_token": token},
                      headers={"Origin": "null"})
        assert r.status_code == 403
        assert "forged" not in _topics(bootstrap) and TOPIC in _topics(bootstrap)
        # the same form with its token, from its own origin, works
        r = http.post("/topics", data={"name": "made", "partitions": "1", "csrf_token": token},
                      headers={"Origin": "http://testserver"})
        assert r.status_code == 200 and "created topic made" in r.text
        assert "made" in _topics(bootstrap)


def test_a_post_without_login_is_refused(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        r = http.post(f"/topics/{TOPIC}/delete", data={"confirm": TOPIC},
                      follow_redirects=False)
        assert r.status_code == 403
        assert TOPIC in _topics(bootstrap)


def test_a_wrong_host_header_is_refused(bootstrap: str) -> None:
    with _client(bootstrap) as http:
        login(http)
        assert http.get("/topics").status_code == 200
        for host in ("evil.example", "evil.example:8080", "127.0.0.2", "testserver.evil"):
            r = http.get("/topics", headers={"Host": host})
            assert r.status_code == 400 and "Host" in r.text, host
            r = http.post("/login", data={"password": PASSWORD}, headers={"Host": host})
            assert r.status_code == 400, host
        # the port does not matter, the name does (case-insensitively)
        assert http.get("/topics", headers={"Host": "TestServer:1234"}).status_code == 200


def test_read_only_has_no_forms_and_refuses_every_post(bootstrap: str) -> None:
    with _client(bootstrap, read_only=True) as http:
        login(http)
        page = http.get(f"/topics/{TOPIC}")
        assert page.status_code == 200 and "read-only" in page.text
        assert 'action="/topics/' not in page.text and 'id="create-topic"' not in \
            http.get("/topics").text
        token = csrf_token(page.text)  # the logout form's
        for path, data in (("/topics", {"name": "ro", "partitions": "1"}),
                           (f"/topics/{TOPIC}/delete", {"confirm": TOPIC}),
                           (f"/topics/{TOPIC}/partitions", {"count": "2"}),
                           (f"/topics/{TOPIC}/config", {"key": "retention.ms", "value": "1"}),
                           ("/groups/g/reset", {"how": "earliest"})):
            r = http.post(path, data={**data, "csrf_token": token})
            assert r.status_code == 403 and "read-only" in r.text, path
        assert "ro" not in _topics(bootstrap)
        assert http.post("/logout", data={"csrf_token": token},
                         follow_redirects=False).status_code == 303


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([str(odradek_executable()), "console", "--bootstrap-server",
                           "127.0.0.1:1", "--port", "1", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_the_console_will_not_start_unlocked(tmp_path: Path) -> None:
    r = _console()
    assert r.returncode == 2 and "--password-file" in r.stderr and "--no-login" in r.stderr
    r = _console("--host", "0.0.0.0", "--no-login")
    assert r.returncode == 2 and "loopback" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = _console("--password-file", str(empty))
    assert r.returncode == 2 and "empty" in r.stderr
    r = _console("--password-file", str(tmp_path / "missing"))
    assert r.returncode == 2 and "missing" in r.stderr
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    r = _console("--password-file", str(secret), "--no-login")
    assert r.returncode == 2 and "not both" in r.stderr
    r = _console("--password-file", str(secret), "--certfile", str(secret))
    assert r.returncode == 2 and "--keyfile" in r.stderr
    assert "hunter2" not in r.stdout + r.stderr


def test_the_password_is_never_printed(bootstrap: str, tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    with running_console(bootstrap, password=PASSWORD, log=log) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        http.post("/login", data={"password": PASSWORD + "x"})
        http.post("/login", data={"password": PASSWORD})
        assert http.get("/topics").status_code == 200
    printed = log.read_text()
    assert "odradek console for" in printed and PASSWORD not in printed


def test_over_tls_the_cookie_is_secure(bootstrap: str, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile = tmp_path / "console.pem", tmp_path / "console.key"
    cert.private_key_pem.write_to_path(str(keyfile))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with running_console(bootstrap, "--certfile", str(certfile), "--keyfile", str(keyfile),
                         password=PASSWORD) as url, \
            httpx.Client(base_url=url.replace("http://", "https://"), verify=context,
                         timeout=30) as http:
        r = http.post("/login", data={"password": PASSWORD, "next": "/topics"},
                      follow_redirects=False)
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "; Secure" in cookie and "HttpOnly" in cookie, cookie
        page = http.get("/topics")
        assert page.status_code == 200 and TOPIC in page.text
        # the Origin check knows the scheme: the same host over plain HTTP is another origin
        r = http.post("/topics", data={"name": "tls", "csrf_token": csrf_token(page.text)},
                      headers={"Origin": url})
        assert r.status_code == 403


def test_no_login_on_loopback_is_open_but_still_wants_tokens(bootstrap: str) -> None:
    with running_console(bootstrap) as url, \
            httpx.Client(base_url=url, timeout=30, follow_redirects=True) as http:  # --no-login
        page = http.get("/topics")
        assert page.status_code == 200 and TOPIC in page.text and 'id="logout"' not in page.text
        r = http.post("/topics", data={"name": "anon", "partitions": "1"})
        assert r.status_code == 403
        r = http.post("/topics", data={"name": "anon", "partitions": "1",
                                       "csrf_token": csrf_token(page.text)})
        assert r.status_code == 200 and "created topic anon" in r.text
        assert http.get("/", headers={"Host": "rebound.example"}).status_code == 400
