"""The web console in a real browser (headless Chromium + Selenium) against a real broker.

One broker with real data (records written by librdkafka, a group's offsets committed by a
librdkafka consumer) and one ``odradek console`` subprocess with a login
(``--password-file``); the browser logs in through the login page, opens each page,
checks what it shows, clicks through a topic creation and an offset reset, charts the
broker's own Prometheus page (its ``metrics.listener``), and saves a screenshot of each
page under ``tmp/artifacts/webconsole`` (printed by the test). The door (issue 49): logged
out the browser sees only the login page; a form on another site (and on another port of
the same host) posting to the console is refused and deletes nothing; a host name rebound
to the console's address is refused; a ``--read-only`` console shows no forms.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from odradek.webconsole.app import record_time
from tests.interop._broker import free_port, start_broker
from tests.webconsole._console import (
    ARTIFACTS,
    PASSWORD,
    browser_login,
    chromium_driver,
    running_console,
    wait_for,
)

pytestmark = pytest.mark.interop

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 10
EVIL = '{"note": "<script>window.__pwned = 1; alert(1)</script>", "n": 7}'
COMMITTED = {0: 2, 1: 5, 2: 10}  # lag 8, 5, 0
TAIL_TOPIC = "tailed"
METERED = "metered"  # written by test_metrics_charts only


def _seed(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, count in ((TOPIC, PARTITIONS), (TAIL_TOPIC, 1)):
        admin.create_topics([NewTopic(name, count, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = EVIL if (p, i) == (0, 3) else json.dumps({"p": p, "i": i})
            producer.produce(TOPIC, key=f"k{p}-{i}", value=value, partition=p,
                             headers=[("source", b"test")])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    consumer.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Any]]:
    tmp = tmp_path_factory.mktemp("webconsole")
    metrics_port = free_port()
    # the broker's own metrics endpoint (odradek.server.metrics) feeds the charts
    with start_broker(tmp, overrides={
        "metrics.listener": f"http://127.0.0.1:{metrics_port}"}) as broker:
        _seed(broker.bootstrap)
        with running_console(broker.bootstrap, "--metrics-url",
                             f"http://127.0.0.1:{metrics_port}/metrics",
                             password=PASSWORD) as url:
            driver = chromium_driver()
            try:
                browser_login(driver, url)
                yield broker.bootstrap, url, driver
            finally:
                driver.quit()


def _shot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def _text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def test_pages_show_the_cluster(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    driver.get(url + "/")
    assert wait_for("the broker count", lambda: _text(driver, "#broker-count")) == "1"
    assert _text(driver, ".card:has(#broker-count)").split() == ["1", "broker"]
    assert _text(driver, "#urp") == "0" and _text(driver, "#offline") == "0"
    assert int(_text(driver, "#partition-count")) >= PARTITIONS
    _shot(driver, "overview")

    driver.get(url + "/topics")
    names = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#topics a.topic")]
    assert TOPIC in names
    _shot(driver, "topics")

    driver.get(f"{url}/topics/{TOPIC}")
    assert wait_for("the topic page", lambda: _text(driver, "#topic-name")) == TOPIC
    rows = driver.find_elements(By.CSS_SELECTOR, "#partitions tr")[1:]
    assert len(rows) == PARTITIONS
    assert _text(driver, "#total-messages") == str(PARTITIONS * PER_PARTITION)
    assert "cleanup.policy" in _text(driver, "#configs")
    _shot(driver, "topic")

    # The record holding <script> shows as text and runs nothing.
    driver.get(f"{url}/topics/{TOPIC}/messages?partition=0&offset=0&limit=20")
    values = wait_for("the records", lambda: [
        e.text for e in driver.find_elements(By.CSS_SELECTOR, "#records pre.value")])
    assert len(values) == PER_PARTITION
    assert values[3] == EVIL
    assert driver.find_elements(By.CSS_SELECTOR, "#records script") == []
    assert driver.execute_script("return window.__pwned === undefined") is True
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 -- raises when no alert is open
    assert "source: test" in _text(driver, "#records tr:nth-child(2)").replace("\n", " ")
    # Timestamps read as dates; the raw milliseconds are the cell's title.
    stamp = driver.find_elements(By.CSS_SELECTOR, "#records td.ts")[0]
    raw = int(str(stamp.get_attribute("title")).removesuffix(" ms"))
    assert stamp.text == record_time(raw) and stamp.text.endswith(" UTC")
    assert stamp.text.startswith(f"{datetime.datetime.now(datetime.UTC).year}-")
    _shot(driver, "messages")

    # Hex view of the same record.
    driver.get(f"{url}/topics/{TOPIC}/messages?partition=0&offset=3&limit=1&format=hex")
    assert wait_for("the hex value", lambda: _text(driver, "#records pre.value")) == \
        EVIL.encode().hex(" ")

    # Live tail: a record produced after the page opened appears, escaped.
    driver.get(f"{url}/topics/{TAIL_TOPIC}/messages?partition=0&limit=5")
    wait_for("the tail checkbox", lambda: driver.find_element(By.ID, "tail")).click()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TAIL_TOPIC, value="<b>tailed</b>", partition=0)
    assert producer.flush(30) == 0
    wait_for("the tailed record", lambda: "<b>tailed</b>" in [
        e.text for e in driver.find_elements(By.CSS_SELECTOR, "#records pre")], timeout=20)
    tailed = driver.find_elements(By.CSS_SELECTOR, "#records td.ts")[-1]
    raw = int(str(tailed.get_attribute("title")).removesuffix(" ms"))
    assert tailed.text == record_time(raw)  # the script formats as the page does


def _lags(driver: Any) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#offsets td.lag")]


def test_group_lag_and_offset_reset(setup: tuple[str, str, Any]) -> None:
    _bootstrap, url, driver = setup
    driver.get(url + "/groups")
    groups = wait_for("the group list", lambda: [
        a.text for a in driver.find_elements(By.CSS_SELECTOR, "#groups a.group")])
    assert "billing" in groups
    driver.get(url + "/groups/billing")
    expected = [str(PER_PARTITION - COMMITTED[p]) for p in range(PARTITIONS)]
    assert wait_for("the lags", lambda: _lags(driver)) == expected
    assert _text(driver, "#total-lag") == str(sum(map(int, expected)))
    # the lag chart has drawn at least one point
    wait_for("the lag chart", lambda: driver.execute_script(
        "const c = Chart.getChart('lag-chart'); return c && c.data.datasets[0].data.length > 0"))
    _shot(driver, "group")

    Select(driver.find_element(By.ID, "reset-how")).select_by_value("earliest")
    driver.find_element(By.ID, "reset").click()
    assert "committed new offsets for 3 partitions" in wait_for(
        "the reset message", lambda: _text(driver, "#message"))
    assert wait_for("the new lags", lambda: _lags(driver)) == [str(PER_PARTITION)] * PARTITIONS
    _shot(driver, "group-after-reset")


def test_reset_refused_while_the_group_has_members(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "live",
                         "auto.offset.reset": "earliest"})
    stop = threading.Event()
    assigned = threading.Event()
    consumer.subscribe([TOPIC], on_assign=lambda c, parts: assigned.set())

    def poll() -> None:
        while not stop.is_set():
            consumer.poll(0.2)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        assert assigned.wait(30), "the consumer never got its assignment"

        def stable_page() -> str | None:
            driver.get(url + "/groups/live")
            return _text(driver, "#state") if _text(driver, "#state") == "STABLE" else None

        wait_for("the live group to be stable", stable_page, timeout=30)
        assert "stop its consumers" in _text(driver, "#reset-refused")
        assert driver.find_elements(By.ID, "reset-offsets") == []
        assert len(driver.find_elements(By.CSS_SELECTOR, "#members tr")) == 2
    finally:
        stop.set()
        thread.join(10)
        consumer.close()


def test_a_consumer_group_of_the_new_protocol(setup: tuple[str, str, Any]) -> None:
    """A KIP-848 group (two librdkafka members with ``group.protocol=consumer``) is listed
    with its type beside the classic ones; its page names the type and shows each member's
    current and target assignment (ConsumerGroupDescribe), both members together owning
    every partition once, and the group's lag."""
    bootstrap, url, driver = setup
    members = [Consumer({"bootstrap.servers": bootstrap, "group.id": "kip848",
                         "group.protocol": "consumer", "client.id": f"new-{i}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
               for i in range(2)]
    stop = threading.Event()
    for member in members:
        member.subscribe([TOPIC])

    def poll() -> None:
        while not stop.is_set():
            for member in members:
                member.poll(0.1)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        def listed() -> dict[str, str] | None:
            driver.get(url + "/groups")
            rows = {r.find_element(By.CSS_SELECTOR, "a.group").text:
                    r.find_element(By.CSS_SELECTOR, "td.group-type").text
                    for r in driver.find_elements(By.CSS_SELECTOR, "#groups tr")[1:]}
            return rows if "kip848" in rows else None

        types = wait_for("the consumer group listed", listed, timeout=30)
        assert types["kip848"] == "consumer" and types["billing"] == "classic"
        _shot(driver, "groups-with-types")

        def split_page() -> list[tuple[str, str]] | None:
            """(assignment, target) of each member once both own what their target says
            and every partition is owned."""
            driver.get(url + "/groups/kip848")
            rows = [(r.find_element(By.CSS_SELECTOR, "td.assignment").text,
                     r.find_element(By.CSS_SELECTOR, "td.target-assignment").text)
                    for r in driver.find_elements(By.CSS_SELECTOR, "#members tr")[1:]]
            owned = sorted(p for current, _ in rows for p in current.split(", ") if p)
            done = (len(rows) == 2 and all(c == t for c, t in rows)
                    and owned == [f"{TOPIC}-{p}" for p in range(PARTITIONS)])
            return rows if done else None

        rows = wait_for("both members reconciled", split_page, timeout=60)
        assert all(current for current, _ in rows)  # 3 partitions: neither member idles
        assert _text(driver, "#group-type") == "consumer"
        assert _text(driver, "#state") == "STABLE"
        assert "assignor uniform" in _text(driver, "p:has(#group-type)")
        headers = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "#members th")]
        assert headers == ["client id", "member id", "host", "assignment", "target assignment"]
        # nothing committed yet: the lag column shows "-" per owned partition
        assert wait_for("the offsets", lambda: _lags(driver)) == ["-"] * PARTITIONS
        _shot(driver, "consumer-group")
    finally:
        stop.set()
        thread.join(10)
        for member in members:
            member.close()


def test_create_a_topic_through_the_form(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    driver.get(url + "/topics")
    wait_for("the create form", lambda: driver.find_element(By.ID, "new-name")).send_keys(
        "made-in-browser")
    partitions = driver.find_element(By.ID, "new-partitions")
    partitions.clear()
    partitions.send_keys("4")
    driver.find_element(By.ID, "create").click()
    assert wait_for("the new topic's page", lambda: _text(driver, "#topic-name")) == \
        "made-in-browser"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#partitions tr")) == 1 + 4
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics("made-in-browser", timeout=10)
    assert len(meta.topics["made-in-browser"].partitions) == 4
    _shot(driver, "topic-created")

    # Deleting asks for the name: a wrong one is refused, the right one deletes.
    driver.find_element(By.CSS_SELECTOR, "#delete-topic input[name=confirm]").send_keys("nope")
    driver.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    assert "confirm" in wait_for("the refusal", lambda: _text(driver, "#error"))
    driver.find_element(By.CSS_SELECTOR, "#delete-topic input[name=confirm]").send_keys(
        "made-in-browser")
    driver.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    assert "deleted topic made-in-browser" in wait_for(
        "the deletion message", lambda: _text(driver, "#message"))
    print(f"artifacts: {ARTIFACTS}")


def test_metrics_charts(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    driver.get(url + "/metrics")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def charted() -> bool:
        # real traffic between the page's scrapes (every 5 s) of the broker's /metrics
        producer.produce(METERED, value=b"x" * 1000)  # auto-created; other tests count TOPIC
        producer.flush(10)
        return bool(driver.execute_script(
            "const c = Chart.getChart('topic-chart'); return !!c && c.data.datasets.some("
            "d => d.label === 'metered bytes_in' && d.data.some(p => p.y > 0))"))

    wait_for("a bytes-in rate for the produced topic on the topic chart", charted, timeout=60)
    assert driver.execute_script(
        "return Chart.getChart('broker-chart').data.datasets.length") >= 1
    assert _text(driver, "#metrics-errors") == ""
    _shot(driver, "metrics")


def _topic_names(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).topics)


def test_logged_out_the_browser_sees_only_the_login_page(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    driver.find_element(By.ID, "logout").click()
    wait_for("the login page", lambda: driver.find_element(By.ID, "password"))
    for path in ("/", "/topics", f"/topics/{TOPIC}/messages?partition=0", "/groups/billing"):
        driver.get(url + path)
        wait_for(f"the login page instead of {path}",
                 lambda: driver.find_element(By.ID, "password"))
        body = _text(driver, "body")
        assert TOPIC not in body and bootstrap not in body and "billing" not in body, path
    driver.get(url + f"/api/topics/{TOPIC}/messages?partition=0&offset=0")
    assert "log in first" in _text(driver, "body")
    _shot(driver, "login")
    # a wrong password, then the right one, which lands on the page first asked for
    driver.get(url + "/groups/billing")
    wait_for("the login page", lambda: driver.find_element(By.ID, "password")).send_keys("nope")
    driver.find_element(By.ID, "login").click()
    assert wait_for("the refusal", lambda: _text(driver, "#login-failure")) == "wrong password"
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "login").click()
    assert wait_for("the group page", lambda: _text(driver, "#group-id")) == "billing"


class _Attacker(BaseHTTPRequestHandler):
    """A page elsewhere whose form posts to the console as soon as it loads."""

    target = ""

    def do_GET(self) -> None:
        page = (f'<form id="f" method="post" action="{self.target}">'
                f'<input name="confirm" value="{TOPIC}"></form>'
                '<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_forged_cross_site_post_is_refused(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    driver.get(url + "/topics")
    wait_for("a logged-in page", lambda: driver.find_element(By.ID, "logout"))
    handler = type("Attacker", (_Attacker,), {"target": f"{url}/topics/{TOPIC}/delete"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        # another site (localhost is not 127.0.0.1: the SameSite cookie stays home), and
        # another port of the same host (same site: the cookie goes, the Origin gives it away)
        for page in (f"http://localhost:{port}/", f"http://127.0.0.1:{port}/"):
            driver.get(page)
            body = wait_for(f"the console's answer to the form on {page}", lambda: (
                driver.current_url.startswith(url) and _text(driver, "body")))
            assert "403 Forbidden" in body, (page, body)
            assert TOPIC in _topic_names(bootstrap), page
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    # the browser is still logged in, and the real form still works
    driver.get(f"{url}/topics/{TOPIC}")
    assert wait_for("the topic page", lambda: _text(driver, "#topic-name")) == TOPIC


def test_a_rebound_host_name_is_refused(setup: tuple[str, str, Any]) -> None:
    _bootstrap, url, _driver = setup
    port = url.rsplit(":", 1)[1]
    # DNS rebinding: the attacker's name now resolves to the console's address
    rebound = chromium_driver("--host-resolver-rules=MAP rebound.example 127.0.0.1")
    try:
        rebound.get(f"http://rebound.example:{port}/login")
        body = wait_for("the refusal", lambda: _text(rebound, "body"))
        assert "400 Bad Request" in body and "Host" in body, body
        assert rebound.find_elements(By.ID, "password") == []
    finally:
        rebound.quit()


def test_a_read_only_console_has_no_forms(setup: tuple[str, str, Any]) -> None:
    bootstrap, url, driver = setup
    with running_console(bootstrap, "--read-only", password=PASSWORD) as ro:
        browser_login(driver, ro)
        driver.get(f"{ro}/topics/{TOPIC}")
        assert wait_for("the topic page", lambda: _text(driver, "#topic-name")) == TOPIC
        assert _text(driver, "#read-only") == "read-only"
        assert [f.get_attribute("id") for f in driver.find_elements(By.TAG_NAME, "form")] == [
            "logout"]
        driver.get(f"{ro}/groups/billing")
        assert wait_for("the group page", lambda: _text(driver, "#group-id")) == "billing"
        assert driver.find_elements(By.ID, "reset-offsets") == []
        _shot(driver, "read-only")
    # the other console's session (another port) was not touched
    driver.get(url + "/topics")
    assert wait_for("a logged-in page", lambda: driver.find_elements(By.ID, "logout"))
