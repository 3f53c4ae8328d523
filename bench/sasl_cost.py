"""What a SASL authentication costs the broker, in CPU per connection.

How it works: one ``odradek serve`` with a PLAINTEXT and a SASL_PLAINTEXT listener
(PLAIN users in the listener's JAAS config; SCRAM users created through
AlterUserScramCredentials with 4,096 and 8,192 iterations). For each mechanism the bench
opens ``--connections`` connections one after the other with the project's client
(connect, ApiVersions, SaslHandshake, SaslAuthenticate, close), after a warm-up, and
reads the broker's CPU time (utime + stime from /proc) before and after. The same count
of PLAINTEXT connections (connect, ApiVersions, close) gives the cost of a connection
without authentication; the difference is what authenticating adds. The client's own
work (SCRAM's PBKDF2 of the password, 4,096 or more HMAC rounds) is in this process, not
the broker's: the broker stores the salted keys and checks the proof with a few HMACs.

    .venv/bin/python bench/sasl_cost.py
    .venv/bin/python bench/sasl_cost.py --connections 500
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from _tools.broker import cpu_seconds, free_port, odradek_serve

from odradek.client.admin import Admin
from odradek.client.connection import BrokerConnection
from odradek.client.security import PLAINTEXT, ClientSecurity

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";')
CASES = (("PLAIN", 0), ("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096),
         ("SCRAM-SHA-512", 8192))


async def _connections(address: str, security: ClientSecurity, count: int) -> None:
    for _ in range(count):
        conn = await BrokerConnection.open(address, security=security)
        await conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args()
    plain_port, sasl_port = free_port(), free_port()
    plain, sasl = f"127.0.0.1:{plain_port}", f"127.0.0.1:{sasl_port}"
    with odradek_serve([
        f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
    ], sasl_port, "sasl-cost-") as proc:

        async def users() -> None:
            admin = Admin(await BrokerConnection.open(plain))
            try:
                await admin.alter_user_scram_credentials(
                    [(f"u{iterations}", mechanism, iterations, "secret")
                     for mechanism, iterations in CASES if iterations], [])
            finally:
                await admin.conn.close()

        asyncio.run(users())

        def cost(address: str, security: ClientSecurity) -> float:
            asyncio.run(_connections(address, security, 20))  # warm-up
            before = cpu_seconds(proc.pid)
            started = time.monotonic()
            asyncio.run(_connections(address, security, args.connections))
            spent = cpu_seconds(proc.pid) - before
            print(f"  {security.mechanism or 'PLAINTEXT':14s} {args.connections} connections "
                  f"in {time.monotonic() - started:.2f} s", file=sys.stderr)
            return float(spent / args.connections * 1000)

        base = cost(plain, PLAINTEXT)
        print(f"Command: `.venv/bin/python bench/sasl_cost.py {' '.join(sys.argv[1:])}`")
        print()
        print("| connection | broker CPU ms a connection | of it authentication |")
        print("|---|---:|---:|")
        print(f"| PLAINTEXT (ApiVersions only) | {base:.2f} | — |")
        for mechanism, iterations in CASES:
            user, password = ("alice", "alice-secret") if not iterations else (
                f"u{iterations}", "secret")
            ms = cost(sasl, ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, password))
            label = mechanism + (f", {iterations:,} iterations" if iterations else "")
            print(f"| SASL_PLAINTEXT {label} | {ms:.2f} | {ms - base:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
