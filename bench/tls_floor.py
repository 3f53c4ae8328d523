"""The floor under TLS on this machine: what encrypting and decrypting cost, without a
broker, a socket or a client.

How it works: a TLS 1.3 session (certificates made here with trustme, the broker's
default suite) is set up between two ``ssl.SSLObject``s over memory BIOs, as asyncio's
TLS layer runs one. Then, in this process, CPU time (``time.process_time``) per GB of
application data for:

- *encrypt*: ``SSLObject.write`` of chunks of 16 KiB to 4 MiB into the outgoing BIO, read
  out after every write (what the broker's TLS writer does when the socket keeps up), and
  after every fourth write (what happens when the socket lags and the TLS layer queues:
  OpenSSL's memory BIO grows, zero-filled, and is compacted as it is read);
- *decrypt*: encrypted records fed to the incoming BIO 256 KiB at a time (asyncio's read
  size) and read with ``SSLObject.read`` into new bytes (asyncio's copying path) or into
  one reused buffer (its buffered-protocol path);
- ``openssl speed -evp`` of the suite's AEAD on 16 KiB blocks (a TLS record), the CPU's
  raw rate, when the ``openssl`` command is there.

Each figure is the median of ``--repeats``. The broker's TLS cost per GB is at least its
plaintext cost plus the encrypt (fetch) or decrypt (produce) figure, and the client pays
the other side; bench/peers.py's TLS cells measure the real thing.

    .venv/bin/python bench/tls_floor.py [--megabytes 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import ssl
import statistics
import subprocess
import sys
import time

import trustme

MIB = 1 << 20


def _pair(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[ssl.SSLObject, ...]:
    """A handshaken (server, server-in, server-out, client, client-in, client-out)."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for end in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return s, s_in, s_out, c, c_in, c_out  # type: ignore[return-value]


def encrypt(server: ssl.SSLContext, client: ssl.SSLContext, total: int, size: int,
            writes_per_read: int) -> float:
    """CPU seconds per GB of writing ``size`` chunks, reading the BIO every
    ``writes_per_read`` writes."""
    s, _, s_out, *_ = _pair(server, client)
    data = b"y" * size
    rounds = max(1, total // (size * writes_per_read))
    started = time.process_time()
    for _ in range(rounds):
        for _ in range(writes_per_read):
            s.write(data)
        s_out.read()
    return (time.process_time() - started) / (rounds * writes_per_read * size) * 1e9


def decrypt(server: ssl.SSLContext, client: ssl.SSLContext, total: int, into: bool) -> float:
    """CPU seconds per GB of feeding records 256 KiB at a time and reading them back."""
    s, s_in, _, c, _, c_out = _pair(server, client)
    records = []
    chunk = b"x" * MIB
    for _ in range(total // MIB):
        c.write(chunk)
        records.append(c_out.read())
    feed = 256 * 1024
    buffer = bytearray(feed)
    view = memoryview(buffer)
    got = 0
    started = time.process_time()
    for record in records:
        for i in range(0, len(record), feed):
            s_in.write(record[i:i + feed])
            while True:
                try:
                    got += s.read(feed, view) if into else len(s.read(feed))
                except ssl.SSLWantReadError:
                    break
    elapsed = time.process_time() - started
    assert got == total // MIB * MIB, got
    return elapsed / got * 1e9


def openssl_speed(cipher: str) -> str:
    if shutil.which("openssl") is None:
        return "openssl not installed"
    evp = {"TLS_AES_256_GCM_SHA384": "aes-256-gcm", "TLS_AES_128_GCM_SHA256": "aes-128-gcm",
           "TLS_CHACHA20_POLY1305_SHA256": "chacha20-poly1305"}.get(cipher, "aes-256-gcm")
    out = subprocess.run(["openssl", "speed", "-seconds", "2", "-bytes", "16384", "-evp",
                          evp], capture_output=True, text=True).stdout.strip().splitlines()
    try:
        kbytes = float(out[-1].split()[-1].rstrip("k"))
    except (IndexError, ValueError):
        return f"openssl speed -evp {evp}: no figure"
    rate = kbytes * 1000 / 1e9
    return f"openssl speed -evp {evp}, 16 KiB: {rate:.2f} GB/s ({1 / rate:.3f} s/GB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(server)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(client)
    cipher = _pair(server, client)[0].cipher()
    total = args.megabytes * MIB

    def median(f: object, *a: object) -> str:
        runs = [f(server, client, total, *a) for _ in range(args.repeats)]  # type: ignore[operator]
        return f"{statistics.median(runs):.3f} ({min(runs):.3f}-{max(runs):.3f})"

    print(f"Python {sys.version.split()[0]}, {ssl.OPENSSL_VERSION}, {cipher}, "
          f"{args.megabytes} MiB a case, median of {args.repeats} (range), "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    print(openssl_speed(cipher[0] if cipher else "") + "\n")
    print("| case | CPU s/GB |\n|---|---:|")
    for size in (16 * 1024, 128 * 1024, 256 * 1024, MIB, 4 * MIB):
        for writes in (1, 4):
            when = "after each write" if writes == 1 else "after 4 writes (queued)"
            print(f"| encrypt, {size // 1024} KiB writes, BIO read {when} | "
                  f"{median(encrypt, size, writes)} |")
    print(f"| decrypt, 256 KiB fed, read into new bytes | {median(decrypt, False)} |")
    print(f"| decrypt, 256 KiB fed, read into a reused buffer | {median(decrypt, True)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
