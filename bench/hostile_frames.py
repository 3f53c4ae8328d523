"""A good client's ApiVersions while unauthenticated connections announce huge frames.

How it works: issue 47's acceptance (the class of Kafka's CVE-2022-34917). One
``odradek serve`` (bench/_tools/broker.py) with a SASL_PLAINTEXT listener (PLAIN; a
PLAINTEXT one beside it for the broker itself) and
the defaults for everything else (``socket.request.max.bytes`` 100 MiB,
``sasl.server.max.receive.size`` 512 KiB, the request memory pool). Per round:

1. *quiet*: the good client alone, for ``--quiet-s`` seconds;
2. *attack*: a child process (so that its sends do not hold this process's interpreter
   while the good client's round trips are timed) opens ``--connections`` unauthenticated
   connections one after the other, each sending a size prefix of ``--announced`` bytes
   and then up to ``--sent`` bytes of the body, keeps them open, and waits until the
   broker has closed each (or ``--close-timeout-s`` passes); the good client runs for as
   long as that takes.

With ``--listener sasl_ssl`` the listener is SASL_SSL (a CA and the broker's PEM keystore
from trustme, in a temporary directory), the good client speaks TLS (its
*connect+ApiVersions* includes the handshake), and ``--hostile`` says what each hostile
connection does: ``frame`` completes the TLS handshake and then sends the size prefix and
body as above; ``stall`` sends all of a real ClientHello but its last byte and then
nothing (the broker's handshake timeout closes it); ``garbage`` sends the prefix and body
in the clear, a Kafka client that forgot TLS (no ClientHello at all). On
``sasl_plaintext`` only ``frame`` applies.

The good client, on the same listener, repeats: connect and ApiVersions (v0) on the new
connection (*connect+ApiVersions*: a client arriving now, through the accept queue the
attack fills), then ApiVersions on a connection it keeps open (*ApiVersions*). Each phase
reports both round trips (p50, p99, max, count), and the broker's RSS (``VmRSS`` of its
process, sampled between the round trips) before, at its peak and after; the attack
phase the hostile connections closed and how long the last close took. The acceptance's
figure is the attack's *ApiVersions* and *connect+ApiVersions* maxima (under 100 ms)
and the RSS growth (under 50 MB), read beside the quiet phase of the same run and the
load average printed with them: on a shared two-core machine a loaded scheduler alone
moves the tail.

    .venv/bin/python bench/hostile_frames.py
    .venv/bin/python bench/hostile_frames.py --rounds 5 --connections 200 --sent 8388608
    .venv/bin/python bench/hostile_frames.py --listener sasl_ssl --hostile stall
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import socket
import ssl
import struct
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import trustme
from _tools.broker import free_port, odradek_serve

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";')
API_VERSIONS = 18


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def api_versions_frame(correlation_id: int) -> bytes:
    """An ApiVersions v0 request (header v1, client id "bench", no body)."""
    client_id = b"bench"
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        need = 4 if len(data) < 4 else 4 + struct.unpack_from(">i", data)[0]
        chunk = sock.recv(need - len(data))
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    return data[4:]


def round_trip(sock: socket.socket, correlation_id: int) -> float:
    """One ApiVersions on ``sock``, in ms; checks the answer (its id, error code 0)."""
    started = time.perf_counter()
    sock.sendall(api_versions_frame(correlation_id))
    answer = read_frame(sock)
    took = (time.perf_counter() - started) * 1000
    cid, error = struct.unpack_from(">ih", answer)
    if cid != correlation_id or error != 0:
        raise RuntimeError(f"ApiVersions answered {cid}/{error}")
    return took


def connect(port: int, tls: ssl.SSLContext | None) -> socket.socket:
    """A connection to the listener, through a TLS handshake when ``tls`` is given."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname="127.0.0.1")
    except BaseException:
        sock.close()
        raise


def connect_round_trip(port: int, tls: ssl.SSLContext | None) -> float:
    """Connect, one ApiVersions, close: in ms, the connect (and handshake) included."""
    started = time.perf_counter()
    with connect(port, tls) as sock:
        round_trip(sock, 1)
    return (time.perf_counter() - started) * 1000


def client_hello(tls: ssl.SSLContext) -> bytes:
    """The first flight of a real TLS client: its ClientHello record(s)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    session = tls.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        session.do_handshake()
    return outgoing.read()


def attack(port: int, connections: int, announced: int, sent: int, close_timeout_s: float,
           hostile_kind: str, cafile: str | None, report: Connection) -> None:
    """The child: open the hostile connections, then wait for the broker to close them;
    sends back (opened, closed, seconds from the first connect to the last close)."""
    body = b"\0" * sent
    tls = client_context(cafile) if cafile is not None else None
    hello = client_hello(tls) if tls is not None else b""
    hostile: list[socket.socket] = []
    started = time.monotonic()
    try:
        for _ in range(connections):
            if hostile_kind == "frame":  # the TLS handshake first, if any
                sock = connect(port, tls)
            else:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            hostile.append(sock)
            try:
                if hostile_kind == "stall":
                    sock.sendall(hello[:-1])  # a ClientHello short of its last byte
                    continue
                sock.sendall(struct.pack(">i", announced))
                sock.sendall(body)
            except OSError:
                pass  # refused at the prefix: the rest cannot be sent
        deadline = time.monotonic() + close_timeout_s
        open_ones = list(hostile)
        while open_ones and time.monotonic() < deadline:
            still = []
            for sock in open_ones:
                sock.settimeout(max(deadline - time.monotonic(), 0.01))
                try:
                    closed = sock.recv(65536) == b""
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
                except ssl.SSLError:  # the broker's alert or close_notify: it closed
                    closed = True
                except TimeoutError:
                    closed = False
                if not closed:
                    still.append(sock)
            open_ones = still
        report.send((len(hostile), len(hostile) - len(open_ones),
                     time.monotonic() - started))
    finally:
        for sock in hostile:
            sock.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    return {"count": len(values), "p50_ms": round(percentile(values, 50), 2),
            "p99_ms": round(percentile(values, 99), 2), "max_ms": round(max(values), 2)}


class GoodClient:
    """The good client's round trips and the broker's RSS between them, for one phase."""

    def __init__(self, port: int, broker_pid: int, tls: ssl.SSLContext | None) -> None:
        self.port = port
        self.pid = broker_pid
        self.tls = tls
        self.sock = connect(port, tls)
        self.correlation_id = 0

    def phase(self, until: object) -> dict[str, object]:
        """Round trips until ``until()`` is true; the phase's figures."""
        connects: list[float] = []
        open_trips: list[float] = []
        rss_before = rss_bytes(self.pid)
        peak = rss_before
        assert callable(until)
        while not until():
            connects.append(connect_round_trip(self.port, self.tls))
            self.correlation_id += 1
            open_trips.append(round_trip(self.sock, self.correlation_id))
            peak = max(peak, rss_bytes(self.pid))
            time.sleep(0.005)  # a client's pace, not a flood of our own
        rss_after = rss_bytes(self.pid)
        return {"connect+ApiVersions": summary(connects), "ApiVersions": summary(open_trips),
                "rss_before_mb": round(rss_before / 1e6, 1),
                "rss_peak_mb": round(peak / 1e6, 1), "rss_after_mb": round(rss_after / 1e6, 1),
                "rss_growth_mb": round((peak - rss_before) / 1e6, 1)}

    def close(self) -> None:
        self.sock.close()


def client_context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


def listener_overrides(listener: str, plain_port: int, port: int,
                       pki: Path) -> tuple[list[str], str | None]:
    """The broker's listener settings, and the CA file a TLS client trusts (or None)."""
    if listener == "sasl_plaintext":
        return [
            f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        ], None
    ca = trustme.CA()
    keystore, cafile = pki / "broker.pem", pki / "ca.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(keystore))
    ca.cert_pem.write_to_path(str(cafile))
    return [
        f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{port}",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
    ], str(cafile)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--announced", type=int, default=100 * 1024 * 1024,
                        help="the size prefix each hostile connection sends")
    parser.add_argument("--sent", type=int, default=512 * 1024,
                        help="bytes of the body each tries to send after it")
    parser.add_argument("--quiet-s", type=float, default=3.0)
    parser.add_argument("--close-timeout-s", type=float, default=30.0)
    parser.add_argument("--listener", choices=("sasl_plaintext", "sasl_ssl"),
                        default="sasl_plaintext")
    parser.add_argument("--hostile", choices=("frame", "stall", "garbage"), default="frame",
                        help="what each hostile connection does (see the header)")
    args = parser.parse_args()
    if args.listener == "sasl_plaintext" and args.hostile != "frame":
        parser.error("--hostile stall and garbage are for --listener sasl_ssl")

    plain_port, port = free_port(), free_port()
    load_before = os.getloadavg()
    result: dict[str, object] = {
        "command": f".venv/bin/python bench/hostile_frames.py {' '.join(sys.argv[1:])}",
        "listener": args.listener, "hostile": args.hostile,
        "connections": args.connections, "announced": args.announced, "sent": args.sent,
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="hostile-frames-pki-") as pki, odradek_serve(
        (settings := listener_overrides(args.listener, plain_port, port, Path(pki)))[0],
        port, "hostile-frames-", start_timeout_s=120,
    ) as proc:
        cafile = settings[1]
        tls = client_context(cafile) if cafile is not None else None
        for _ in range(20):  # warm-up: the first connections fill the broker's caches
            connect_round_trip(port, tls)
        client = GoodClient(port, proc.pid, tls)
        rss_start = rss_bytes(proc.pid)
        rounds: list[dict[str, object]] = []
        try:
            for _ in range(args.rounds):
                quiet_end = time.monotonic() + args.quiet_s
                quiet = client.phase(lambda end=quiet_end: time.monotonic() >= end)
                receive, send = multiprocessing.Pipe(duplex=False)
                child = multiprocessing.Process(target=attack, args=(
                    port, args.connections, args.announced, args.sent,
                    args.close_timeout_s, args.hostile, cafile, send))
                child.start()
                attacked = client.phase(receive.poll)
                opened, closed, seconds = receive.recv()
                child.join(30)
                attacked.update({"hostile_opened": opened, "hostile_closed": closed,
                                 "hostile_all_closed_after_s": round(seconds, 2)})
                rounds.append({"quiet": quiet, "attack": attacked})
        finally:
            client.close()
        rss_end = rss_bytes(proc.pid)
    result["rounds"] = rounds
    result["rss_start_mb"] = round(rss_start / 1e6, 1)
    result["rss_end_mb"] = round(rss_end / 1e6, 1)
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    for phase in ("quiet", "attack"):
        for kind in ("connect+ApiVersions", "ApiVersions"):
            values = [r[phase][kind] for r in rounds]  # type: ignore[index]
            result[f"{phase} {kind} max_ms"] = max(v.get("max_ms", 0) for v in values)
    result["attack rss_growth_mb max"] = max(
        r["attack"]["rss_growth_mb"] for r in rounds)  # type: ignore[index]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
