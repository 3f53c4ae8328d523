"""TLS terminated in a child process in front of the broker's PLAINTEXT listener, and the
bench that sets it against the broker's own TLS transport (a prototype: bench only).

How it works: the broker's SSL listener decrypts on its event-loop thread (Odradek's
``server/network/tls_transport.py``, the part Kafka's ``SslTransportLayer`` plays), so a
TLS produce pays the decryption on the one thread that bounds the broker's rate. Here a
separate process (its own interpreter and GIL, as stunnel or a TLS-terminating proxy in
front of Kafka would be) accepts the TLS connections, and per connection:

- handshakes an ``ssl.SSLObject`` over memory BIOs on the blocking socket (a deadline for
  the handshake), then connects to the broker's plaintext backend listener;
- an *up* thread reads the client's socket with ``recv_into`` up to 1 MiB (one system call
  however many TLS records arrived), feeds the incoming BIO, decrypts every whole record
  into one buffer (``SSLObject.read`` into a memoryview, OpenSSL's ``SSL_read`` with the
  GIL released) and forwards the plaintext with one ``sendall``;
- a *down* thread reads the broker's answers with ``recv_into`` up to 1 MiB, encrypts them
  with one ``SSLObject.write`` and sends the outgoing BIO's records with one ``sendall``;
- with ``--pipeline`` the up thread's sends go to a third thread, two buffers in turn
  (measured: no faster);
- one lock per connection serialises the two threads' use of the ``SSL`` object (OpenSSL
  does not allow one ``SSL`` to be used from two threads at once); the socket reads and
  the sends to the broker happen outside it.

The broker gets a third listener, ``TERM`` (``listener.security.protocol.map``
``TERM:PLAINTEXT``), whose ``advertised.listeners`` entry is the terminator's port: a
client bootstrapped through the terminator is answered with the terminator's address,
as Kafka answers each client with the endpoints of the listener it came in on.

Usage::

    .venv/bin/python bench/tls_terminator.py serve --listen 127.0.0.1:9093 \\
        --backend 127.0.0.1:9095 --keystore server.pem [--pipeline]
    .venv/bin/python bench/tls_terminator.py bench [--rounds 3] [--records 20000] \\
        [--kinds fetch-produce,fetch] [--broker-override KEY=VALUE ...] [--pipeline] \\
        [--out bench/results/tls-terminator.md]

``bench``: per round the three paths (plaintext direct, TLS direct through the broker's
own transport, TLS via the terminator) in an order rotating between rounds, each on a
fresh broker (PLAINTEXT, SSL and TERM listeners; certificates made at run time with
bench/peers.py's ``make_certs``, as its TLS cells make them) and, for the third, a fresh
terminator; each path produces ``--records`` x 100 KB records (acks=1, 1 MB batches,
1 partition; peers' ``tls-fetch-produce`` cell) with rdkafka_performance and fetches them
back (8 MiB partition fetches; peers' ``tls-fetch``). A fresh broker per path because a
later cell on the same broker paid for the earlier cells' page-cache writeback (up to
2x its CPU per GB). It reports MB/s, the ratio to plaintext, and CPU seconds per GB of
the broker (and of its event-loop thread), of the terminator and of the client, with
the 1-minute load average at each cell's start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import peers  # bench/peers.py: broker, load generator, certificates

CHUNK = 1 << 20  # the largest read, either direction
HANDSHAKE_TIMEOUT_S = 10.0
PIPELINE = False  # serve --pipeline: the up direction's sends on a thread of their own
PATHS = ("PLAINTEXT", "SSL", "SSL-TERM")
KINDS = ("fetch-produce", "fetch")

# ---------------------------------------------------------------------------- terminator


def _flush(sock: socket.socket, outgoing: ssl.MemoryBIO) -> None:
    if outgoing.pending:
        sock.sendall(outgoing.read())


def _handshake(sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO,
               outgoing: ssl.MemoryBIO) -> None:
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    while True:
        try:
            tls.do_handshake()
            _flush(sock, outgoing)
            break
        except ssl.SSLWantReadError:
            _flush(sock, outgoing)
            if time.monotonic() > deadline:
                raise TimeoutError("TLS handshake timed out") from None
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed during the TLS handshake") from None
            incoming.write(data)
    sock.settimeout(None)


class Connection:
    """One client connection: its TLS state, its backend socket and the two threads."""

    def __init__(self, client: socket.socket, context: ssl.SSLContext,
                 backend: tuple[str, int]) -> None:
        self.client = client
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.backend_address = backend
        self.backend: socket.socket | None = None
        self.lock = threading.Lock()  # the SSL object and the sends to the client

    def run(self) -> None:
        try:
            _handshake(self.client, self.tls, self.incoming, self.outgoing)
            self.backend = socket.create_connection(self.backend_address)
            for s in (self.client, self.backend):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._down, daemon=True).start()
            self._up()
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            if self.backend is not None:  # the broker sees the end; _down closes the rest
                with contextlib.suppress(OSError):
                    self.backend.shutdown(socket.SHUT_WR)
            else:
                self.client.close()

    def _up(self) -> None:
        """Client -> broker: read, decrypt every whole record, forward in one send (with
        ``--pipeline``, the sends run on a thread of their own, two buffers in turn, so the
        next read and decryption overlap the last send)."""
        assert self.backend is not None
        cipher = bytearray(CHUNK)
        cipher_view = memoryview(cipher)
        buffers = [memoryview(bytearray(CHUNK + (64 << 10))) for _ in range(2 if PIPELINE
                                                                            else 1)]
        free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        ready: queue.SimpleQueue[tuple[memoryview, int] | None] = queue.SimpleQueue()
        for b in buffers:
            free.put(b)
        if PIPELINE:
            threading.Thread(target=self._forward, args=(ready, free), daemon=True).start()

        def forward(view: memoryview, size: int) -> None:
            if PIPELINE:
                ready.put((view, size))
            else:
                assert self.backend is not None
                self.backend.sendall(view[:size])
                free.put(view)

        try:
            n = 0  # the handshake's last read may have brought records already: decrypt first
            while True:
                more = True
                while more:
                    filled = 0
                    plain_view = free.get()
                    with self.lock:
                        if n:
                            self.incoming.write(cipher_view[:n])
                            n = 0
                        while True:
                            room = len(plain_view) - filled
                            if room < (17 << 10):  # a TLS record may not fit: forward first
                                break
                            try:
                                got = cast(int, self.tls.read(room, plain_view[filled:]))
                            except ssl.SSLWantReadError:
                                more = False
                                break
                            except ssl.SSLZeroReturnError:
                                got = 0
                            if not got:  # close_notify
                                if filled:
                                    forward(plain_view, filled)
                                else:
                                    free.put(plain_view)
                                return
                            filled += got
                        _flush(self.client, self.outgoing)  # post-handshake messages
                    if filled:
                        forward(plain_view, filled)
                    else:
                        free.put(plain_view)
                n = self.client.recv_into(cipher_view)
                if not n:
                    return
        finally:
            if PIPELINE:
                ready.put(None)
                for _ in buffers:  # every send done before run() shuts the backend down
                    with contextlib.suppress(queue.Empty):  # (one may be in this hand)
                        free.get(timeout=5)

    def _forward(self, ready: queue.SimpleQueue[tuple[memoryview, int] | None],
                 free: queue.SimpleQueue[memoryview]) -> None:
        assert self.backend is not None
        while (item := ready.get()) is not None:
            view, size = item
            with contextlib.suppress(OSError):  # the connection is going: keep returning
                self.backend.sendall(view[:size])
            free.put(view)

    def _down(self) -> None:
        """Broker -> client: read, encrypt in one write, send the records in one send."""
        assert self.backend is not None
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while True:
                n = self.backend.recv_into(view)
                if not n:
                    break
                with self.lock:
                    self.tls.write(view[:n])
                    _flush(self.client, self.outgoing)
        except (OSError, ssl.SSLError):
            pass
        finally:
            for s in (self.client, self.backend):
                with contextlib.suppress(OSError):
                    s.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def serve(listen: tuple[str, int], backend: tuple[str, int], keystore: Path) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(keystore))
    server = socket.create_server(listen, backlog=128)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        client, _ = server.accept()
        threading.Thread(target=Connection(client, context, backend).run,
                         daemon=True).start()


# ---------------------------------------------------------------------------- bench


@dataclass(frozen=True)
class TermSpec(peers.Spec):
    """Odradek with a third listener, TERM (plaintext), advertised at the terminator."""

    backend_port: int = 0
    public_port: int = 0
    overrides: tuple[str, ...] = ()  # more broker settings (--broker-override), every path

    def argv(self, port: int, data: Path, metrics_port: int = 0,
             tls: tuple[int, Path] | None = None) -> list[str]:
        assert tls is not None
        argv = super().argv(port, data, metrics_port, tls)
        at = next(i for i, a in enumerate(argv) if a.startswith("listeners="))
        argv[at] += f",TERM://127.0.0.1:{self.backend_port}"
        return [*argv,
                "--override", "listener.security.protocol.map="
                "PLAINTEXT:PLAINTEXT,SSL:SSL,TERM:PLAINTEXT",
                "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},"
                f"SSL://127.0.0.1:{tls[0]},TERM://127.0.0.1:{self.public_port}",
                *(a for o in self.overrides for a in ("--override", o))]


class Terminator:
    """``serve`` in a child process of its own session."""

    def __init__(self, port: int, backend_port: int, keystore: Path, log: Path,
                 pipeline: bool = False) -> None:
        self.port = port
        self.log = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "serve", "--listen", f"127.0.0.1:{port}",
             "--backend", f"127.0.0.1:{backend_port}", "--keystore", str(keystore),
             *(["--pipeline"] if pipeline else [])],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the terminator did not listen: see {log}") from None
                time.sleep(0.1)

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / peers.CLK

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@dataclass
class Cell:
    round: int
    path: str
    kind: str
    result: peers.Result
    term_cpu: float = 0.0
    load: float = 0.0

    def per_gb(self, seconds: float) -> float:
        gb = self.result.msgs * self.result.size / 1e9
        return seconds / gb if gb else 0.0

    @property
    def mb_s(self) -> float:
        return self.result.rate * self.result.size / 1e6


def run_path(r: int, path: str, records: int, kinds: tuple[str, ...], certs: Path,
             overrides: tuple[str, ...] = (), pipeline: bool = False) -> list[Cell]:
    """One path of one round on a fresh broker (and terminator), its data removed after:
    a later cell on the same broker paid for the earlier cells' page-cache writeback."""
    backend, public = peers._free_port(), peers._free_port()
    spec = TermSpec("odradek", "disk (page cache)", backend_port=backend, public_port=public,
                    overrides=overrides)
    data = peers.WORK / f"term{r}-{path.lower()}"
    shutil.rmtree(data, ignore_errors=True)
    broker = peers.Broker(spec, data, certs)
    term: Terminator | None = None
    cells: list[Cell] = []
    try:
        if path == "SSL-TERM":
            term = Terminator(public, backend, certs / "server.pem",
                              peers.WORK / f"term{r}.log", pipeline)
            broker.tls_bootstrap = f"127.0.0.1:{public}"
        client = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}
        tls = None if path == "PLAINTEXT" else client
        topic = f"term-{path.lower()}"
        peers.create_topic(broker, topic, 1)
        for kind in kinds:
            load = os.getloadavg()[0]
            t0 = term.cpu() if term else 0.0
            if kind == "fetch-produce":
                res = peers.produce(broker, topic, records, "1", 1_000_000, "none", 0,
                                    size=peers.BIG, tls=tls)
            else:
                res = peers.consume(broker, topic, records, 1, size=peers.BIG, tls=tls)
            cell = Cell(r, path, kind, res, (term.cpu() - t0) if term else 0.0, load)
            cells.append(cell)
            print(f"  round {r} {path:9s} {kind:13s} {cell.mb_s:7,.0f} MB/s broker "
                  f"{cell.per_gb(res.cpu):.2f} loop {cell.per_gb(res.extra['loop_cpu']):.2f}"
                  f" term {cell.per_gb(cell.term_cpu):.2f} client "
                  f"{cell.per_gb(res.extra['client_cpu']):.2f} s/GB, load {load:.1f}"
                  + (f" ERROR {res.error}" if res.error else ""), file=sys.stderr,
                  flush=True)
            if res.error:
                break
    finally:
        if term is not None:
            term.stop()
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    return cells


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


def table(cells: list[Cell], kinds: tuple[str, ...]) -> str:
    titles = {"fetch-produce": "produce 100 KB records, 1 MB batches",
              "fetch": "fetch them back (8 MiB partition fetches)"}
    by = {(c.round, c.path, c.kind): c for c in cells}
    rounds = sorted({c.round for c in cells})
    out = ["| workload | round | load avg | PLAINTEXT | SSL | SSL via terminator | SSL / PT | "
           "terminator / PT | broker cpu-s/GB PT / SSL / term | of which its event-loop "
           "thread | terminator cpu-s/GB | client cpu-s/GB PT / SSL / term |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def fmt(x: float) -> str:
        return f"{x:.2f}" if x else "—"

    for kind in kinds:
        ssl_r: list[float] = []
        term_r: list[float] = []
        for r in rounds:
            got = [by.get((r, p, kind)) for p in PATHS]
            if not any(got):
                continue
            pt, tl, tm = got
            rates = [c.mb_s if c and not c.result.error else 0.0 for c in got]
            sr = rates[1] / rates[0] if rates[0] and rates[1] else 0.0
            tr = rates[2] / rates[0] if rates[0] and rates[2] else 0.0
            if sr:
                ssl_r.append(sr)
            if tr:
                term_r.append(tr)

            def cpu(c: Cell | None, what: str) -> str:
                if c is None or not c.result.msgs:
                    return "—"
                res = c.result
                s = {"broker": res.cpu, "loop": res.extra.get("loop_cpu", 0.0),
                     "client": res.extra.get("client_cpu", 0.0), "term": c.term_cpu}[what]
                return f"{c.per_gb(s):.2f}"

            load = max(c.load for c in got if c)
            out.append(
                f"| {titles[kind]} | {r} | {load:.1f} | "
                + " | ".join(f"{x:,.0f} MB/s" if x else "fail" for x in rates)
                + f" | {fmt(sr)} | {fmt(tr)} | "
                + " / ".join(cpu(c, "broker") for c in got) + " | "
                + " / ".join(cpu(c, "loop") for c in got) + f" | {cpu(tm, 'term')} | "
                + " / ".join(cpu(c, "client") for c in got) + " |")
            del pt, tl
        if len(ssl_r) > 1 or len(term_r) > 1:
            out.append(f"| {titles[kind]} | median | | | | | **{fmt(_median(ssl_r))}** "
                       f"({fmt(min(ssl_r, default=0))}-{fmt(max(ssl_r, default=0))}) | "
                       f"**{fmt(_median(term_r))}** ({fmt(min(term_r, default=0))}-"
                       f"{fmt(max(term_r, default=0))}) | | | | |")
    return "\n".join(out) + "\n"


def bench(args: argparse.Namespace) -> int:
    peers.ensure_tools(need_venv=False)
    peers.WORK.mkdir(parents=True, exist_ok=True)
    kinds = tuple(k for k in KINDS if k in args.kinds.split(","))
    certs = peers.make_certs(peers.WORK / "certs-term")
    started, load0 = time.monotonic(), os.getloadavg()
    cells: list[Cell] = []
    for r in range(args.rounds):
        for path in PATHS[r % 3:] + PATHS[:r % 3]:  # each path first once in 3 rounds
            try:
                cells += run_path(r, path, args.records, kinds, certs,
                                  tuple(args.broker_override), args.pipeline)
            except Exception as e:  # one cell failing must not end the sitting
                print(f"  round {r} {path}: {e!r}", file=sys.stderr)
    shutil.rmtree(peers.WORK / "certs-term", ignore_errors=True)
    load1 = os.getloadavg()
    argv = " ".join(sys.argv[1:])
    text = (f"{peers.environment(['odradek'])}; load average at the start "
            f"{'/'.join(f'{x:.1f}' for x in load0)}, at the end "
            f"{'/'.join(f'{x:.1f}' for x in load1)}\n\n"
            f"Command: `.venv/bin/python bench/tls_terminator.py {argv}` "
            f"({time.monotonic() - started:.0f} s; {args.records:,} records of 100 KB per "
            "cell; PT = plaintext direct, SSL = the broker's own TLS transport, term = TLS "
            "via bench/tls_terminator.py's child process to the broker's TERM listener; "
            "load avg = the highest 1-minute load average at a cell's start)\n\n"
            + table(cells, kinds))
    errors = [c for c in cells if c.result.error]
    if errors:
        text += "\nIncomplete cells:\n\n" + "".join(
            f"- round {c.round} {c.path} {c.kind}: {c.result.error}\n" for c in errors)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the terminator")
    s.add_argument("--listen", required=True, help="host:port of the TLS listener")
    s.add_argument("--backend", required=True, help="host:port of the broker's plaintext")
    s.add_argument("--keystore", required=True, type=Path, help="PEM key and chain")
    s.add_argument("--pipeline", action="store_true",
                   help="send to the broker on a thread of its own (two buffers in turn)")
    b = sub.add_parser("bench", help="plaintext, TLS and TLS via the terminator")
    b.add_argument("--rounds", type=int, default=3)
    b.add_argument("--records", type=int, default=20_000, help="100 KB records per cell")
    b.add_argument("--kinds", default=",".join(KINDS), help=f"of {','.join(KINDS)}")
    b.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting for every path (repeatable)")
    b.add_argument("--pipeline", action="store_true",
                   help="the terminator's sends to the broker on a thread of their own")
    b.add_argument("--out", default=str(peers.ROOT / "bench" / "results" /
                                        "tls-terminator.md"))
    args = parser.parse_args(argv)
    if args.command == "serve":
        global PIPELINE
        PIPELINE = args.pipeline
        serve(_address(args.listen), _address(args.backend), args.keystore)
        return 0
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
