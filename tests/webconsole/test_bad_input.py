"""The console's forms against a real broker through Starlette's test client (no browser
needed): changes land in the cluster, and bad input gets a clear message (a 4xx for pages),
never a traceback. The client logs in and posts each form with its CSRF token, as the
browser does (the refusals without one are test_guard.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from odradek.webconsole.app import create_app
from odradek.webconsole.guard import Guard
from tests.interop._broker import start_broker
from tests.webconsole._console import PASSWORD, csrf_token, login

pytestmark = pytest.mark.interop


class FormClient(TestClient):
    """A logged-in test client whose POSTs carry the session's CSRF token."""

    token = ""

    def post(self, url: Any, *, data: Any = None, **kw: Any) -> Any:  # type: ignore[override]
        return super().post(url, data={**(data or {}), "csrf_token": self.token}, **kw)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    guard = Guard(password=PASSWORD.encode(), allowed_hosts=frozenset({"testserver"}))
    with start_broker(Path(tmp_path_factory.mktemp("console-bad"))) as broker, \
            FormClient(create_app(broker.bootstrap, guard=guard)) as http:
        login(http)
        http.token = csrf_token(http.get("/topics").text)
        assert http.post("/topics", data={"name": "t", "partitions": "2"},
                         follow_redirects=False).status_code == 303
        yield http


def test_unknown_topic_is_a_clear_error(client: TestClient) -> None:
    r = client.get("/topics/no-such-topic")
    assert r.status_code == 400
    assert "UNKNOWN_TOPIC_OR_PART" in r.text


def test_bad_forms_come_back_with_a_message(client: TestClient) -> None:
    r = client.post("/topics", data={"name": "x", "partitions": "many"})
    assert r.status_code == 200 and "invalid literal" in r.text
    r = client.post("/topics", data={"name": "t", "partitions": "1"})
    assert "TOPIC_ALREADY_EXISTS" in r.text
    r = client.post("/topics", data={"name": "y", "partitions": "1", "configs": "nokey"})
    assert "a config is key=value" in r.text
    r = client.post("/topics/t/partitions", data={"count": "1"})
    assert "INVALID_PARTITIONS" in r.text
    r = client.post("/topics/t/config", data={"key": "retention.ms", "value": "soon"})
    assert "INVALID_CONFIG" in r.text or "INVALID_REQUEST" in r.text
    r = client.get("/topics/t/messages?partition=9")
    assert r.status_code == 400 and "t has no partition 9" in r.text
    r = client.get("/topics/t/messages?partition=0&timestamp=yesterday")
    assert r.status_code == 400 and "not a timestamp" in r.text
    r = client.get("/api/topics/t/messages?partition=0")
    assert r.status_code == 400 and "error" in r.json()


def test_reset_of_a_group_without_offsets_is_refused(client: TestClient) -> None:
    r = client.post("/groups/nobody/reset", data={"how": "earliest"})
    assert "has no committed offsets" in r.text


def test_forms_change_the_topic(client: TestClient) -> None:
    client.post("/topics", data={"name": "forms", "partitions": "2",
                                 "configs": "cleanup.policy=compact"})
    r = client.post("/topics/forms/partitions", data={"count": "3"})
    assert "partitions added" in r.text
    assert r.text.count('<tr class="">') + r.text.count('<tr class="bad">') == 3
    r = client.post("/topics/forms/config", data={"key": "retention.ms", "value": "1000"})
    assert "retention.ms updated" in r.text
    assert "<td>retention.ms</td><td>1000</td><td>topic</td>" in r.text
    assert "<td>cleanup.policy</td><td>compact</td><td>topic</td>" in r.text
    r = client.post("/topics/forms/config", data={"key": "retention.ms", "reset": "1"})
    assert "<td>retention.ms</td><td>604800000</td><td>default</td>" in r.text
