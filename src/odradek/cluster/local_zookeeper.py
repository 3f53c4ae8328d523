"""A local Apache ZooKeeper server for ``odradek dev-cluster`` and the tests.

How it starts: Debian's ``zookeeper`` package (3.8) puts the server in
/usr/share/java/zookeeper.jar, whose manifest Class-Path names every dependency. We run
``java -cp zookeeper.jar[:slf4j-simple.jar] org.apache.zookeeper.server.ZooKeeperServerMain
zoo.cfg`` directly. ``zkServer.sh start-foreground zoo.cfg`` (in /usr/share/zookeeper/bin)
works too, but it sources /etc/zookeeper/conf/environment (``-Dzookeeper.log.dir=
/var/log/zookeeper``, JMX on, /etc on the classpath), runs the quorum peer main class, and
with no slf4j binding on its classpath the server logs nothing at all; the direct command
depends on nothing but the jar and our own ``zoo.cfg``, and its log (slf4j-simple, when
installed) goes to the file we name.

The admin server (Jetty on :8080) is off, the four-letter words we use are allowed, and
readiness is ``ruok`` → ``imok`` and ``srvr`` naming the server's mode (it says "not
currently serving requests" until the database is loaded), within a deadline. Stopping is
SIGTERM, then SIGKILL after a grace period. The server runs in its own session (process
group), so a Ctrl-C in the terminal reaches only the tool that started it, which stops it
after the brokers.

SASL (for the tests of ``zookeeper.set.acl``): given ``sasl_users`` (name → password), the
server is started as Kafka's docs set one up for DIGEST-MD5: a JAAS file with a ``Server``
section (``DigestLoginModule`` with one ``user_<name>="<password>"`` option per user)
named by ``-Djava.security.auth.login.config``, and ``authProvider.1=...
SASLAuthenticationProvider`` and ``requireClientAuthScheme=sasl`` in ``zoo.cfg``. The JAAS
file is written 0600 (narrowed first if an earlier run left a wider one, as is ``zoo.cfg``
with TLS, which holds the stores' passwords). Without ``sasl_users`` the server and its
``zoo.cfg`` are as before.

TLS (for the tests of ``zookeeper.ssl.*``): given a :class:`ServerTls`, the server listens
on a ``secureClientPort`` only (no plaintext port), with ZooKeeper's Netty connection
factory (``serverCnxnFactory=...NettyServerCnxnFactory``, the only one that speaks TLS),
the keystore and truststore named by ``ssl.keyStore.*``/``ssl.trustStore.*`` and
``ssl.clientAuth=need``: a client without a certificate the truststore trusts is refused.
The four-letter words of the readiness check then go over TLS too, with
:attr:`ServerTls.probe`, a client context the server trusts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "LocalZooKeeper",
    "ServerTls",
    "ZooKeeperInstall",
    "ZooKeeperNotInstalled",
    "ZooKeeperStartError",
    "find_install",
    "four_letter",
    "free_port",
    "port_free",
    "start_zookeeper",
]

#: Where Debian's ``zookeeper`` package puts the server jar (a symlink to the versioned one).
JAVA_SHARE = Path("/usr/share/java")
ZOOKEEPER_HOME = Path("/usr/share/zookeeper")
#: slf4j's simple binding: without one the server logs nothing at all.
SLF4J_BINDING = "slf4j-simple.jar"
NETTY_CODEC = "netty-codec.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = "install Debian's zookeeper package: apt-get install zookeeper"

#: ZooKeeper's own default tick; sessions may last between 2 and 20 ticks.
DEFAULT_TICK_MS = 2000
START_DEADLINE_S = 30.0
STOP_GRACE_S = 10.0
#: A small heap and the client JIT: the server holds a few hundred znodes at most here
#: (a benchmark of thousands of partitions asks for more heap).
DEFAULT_HEAP_MB = 128
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dzookeeper.admin.enableServer=false")
#: The server side of SASL DIGEST-MD5 (ZooKeeper's names).
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
#: The connection factory that speaks TLS (the default NIO one does not).
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


class ZooKeeperNotInstalled(RuntimeError):
    """Debian's zookeeper package or a JVM is missing; the message says what to install."""


class ZooKeeperStartError(RuntimeError):
    """The server exited at start or did not answer ``ruok`` in time (its log tail attached)."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's side of mutual TLS: its keystore, the truststore its clients'
    certificates must chain to (PKCS12 or PEM, ZooKeeper's ``ssl.*`` settings), and a
    client context it trusts, for the readiness probe."""

    keystore: Path
    keystore_password: str = field(repr=False)
    truststore: Path
    truststore_password: str = field(repr=False)
    probe: ssl.SSLContext
    store_type: str = "PKCS12"
    #: ZooKeeper offers only ``ssl.protocol`` (TLSv1.2) unless told more, and 3.8's
    #: default cipher suites are TLSv1.2's only: TLSv1.3 needs its suites named.
    protocols: tuple[str, ...] = ("TLSv1.3", "TLSv1.2")
    cipher_suites: tuple[str, ...] = (
        "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    )

    def config_lines(self) -> str:
        def escaped(value: str) -> str:  # java.util.Properties: a backslash escapes
            return value.replace("\\", "\\\\")

        return (
            f"serverCnxnFactory={NETTY_FACTORY}\n"
            f"ssl.keyStore.location={escaped(str(self.keystore))}\n"
            f"ssl.keyStore.password={escaped(self.keystore_password)}\n"
            f"ssl.keyStore.type={self.store_type}\n"
            f"ssl.trustStore.location={escaped(str(self.truststore))}\n"
            f"ssl.trustStore.password={escaped(self.truststore_password)}\n"
            f"ssl.trustStore.type={self.store_type}\n"
            "ssl.clientAuth=need\n"
            f"ssl.protocol={self.protocols[0]}\n"
            f"ssl.enabledProtocols={','.join(self.protocols)}\n"
            f"ssl.ciphersuites={','.join(self.cipher_suites)}\n"
        )


@dataclass(frozen=True, slots=True)
class ZooKeeperInstall:
    java: Path
    jar: Path
    slf4j_binding: Path | None
    #: Netty's codec jar: the TLS port's handler needs it, and Debian's zookeeper.jar
    #: manifest leaves it out of its Class-Path (it names netty-handler, not its codec).
    netty_codec: Path | None = None

    @property
    def classpath(self) -> str:
        parts = [self.jar, *(p for p in (self.slf4j_binding, self.netty_codec) if p)]
        return os.pathsep.join(str(p) for p in parts)


def _find_jar(java_share: Path) -> Path | None:
    direct = java_share / "zookeeper.jar"
    if direct.is_file():
        return direct
    # A versioned jar only (zookeeper-3.8.0.jar), not zookeeper-jute/-it/-recipes-*.
    versioned = sorted(p for p in java_share.glob("zookeeper-[0-9]*.jar") if p.is_file())
    return versioned[-1] if versioned else None


def _find_java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


def find_install(java_share: Path = JAVA_SHARE) -> ZooKeeperInstall:
    """The ZooKeeper jar and the JVM to run it; :class:`ZooKeeperNotInstalled` if missing."""
    jar = _find_jar(java_share)
    if jar is None:
        raise ZooKeeperNotInstalled(
            f"no ZooKeeper server jar in {java_share} (zookeeper.jar or zookeeper-<version>.jar)"
            f": {INSTALL_HINT} (`make test`'s set-up does)"
        )
    java = _find_java()
    if java is None:
        raise ZooKeeperNotInstalled(
            "no java on PATH or in JAVA_HOME: ZooKeeper needs a JVM "
            "(apt-get install zookeeper pulls one in; or install default-jre-headless)"
        )
    binding = java_share / SLF4J_BINDING
    codec = java_share / NETTY_CODEC
    return ZooKeeperInstall(java, jar, binding if binding.is_file() else None,
                            codec if codec.is_file() else None)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bind to port 0, read it back, close)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound now (the server sets SO_REUSEADDR, so do we)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def four_letter(port: int, word: str, timeout: float = 1.0, host: str = "127.0.0.1",
                tls: ssl.SSLContext | None = None) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ...) and return the whole answer (over
    TLS with ``tls``, to a ``secureClientPort``)."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        sock.sendall(word.encode())
        chunks = []
        with contextlib.suppress(ssl.SSLZeroReturnError, ssl.SSLEOFError):
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    return b"".join(chunks).decode()


def _ready(port: int, tls: ssl.SSLContext | None = None) -> bool:
    # ``ruok`` answers ``imok`` as soon as the port is open, before the server has loaded its
    # database; ``srvr`` names the mode only once it serves requests.
    try:
        return (four_letter(port, "ruok", 0.5, tls=tls) == "imok"
                and "Mode: " in four_letter(port, "srvr", 0.5, tls=tls))
    except OSError:
        return False


def _private(path: Path) -> None:
    """Make ``path`` 0600 before secrets are written to it: a new file is created so, and
    one left by an earlier run (a wider mode: no secrets then) is narrowed first."""
    path.touch(mode=0o600)
    path.chmod(0o600)


def write_config(path: Path, data_dir: Path, port: int, tick_ms: int, force_sync: bool,
                 max_session_timeout_ms: int | None = None, sasl: bool = False,
                 tls: ServerTls | None = None) -> None:
    # ZooKeeper caps a client's session timeout at maxSessionTimeout, 20 ticks by default
    # (40 s with the default tick; 4 s with a 200 ms tick, shorter than a broker may ask).
    max_session = max_session_timeout_ms or 20 * tick_ms
    if tls:  # it holds the stores' passwords
        _private(path)
    path.write_text(
        f"tickTime={tick_ms}\n"
        f"maxSessionTimeout={max_session}\n"
        f"dataDir={data_dir}\n"
        + (f"secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n" if tls else
           f"clientPort={port}\nclientPortAddress=127.0.0.1\n")
        + "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,cons\n"
        # fsync of the transaction log costs time and buys nothing for throwaway data
        f"forceSync={'yes' if force_sync else 'no'}\n"
        + (f"authProvider.1={SASL_AUTH_PROVIDER}\nrequireClientAuthScheme=sasl\n"
           if sasl else "")
        + (tls.config_lines() if tls else "")
    )


def write_server_jaas(path: Path, users: Mapping[str, str]) -> None:
    """The ``Server`` JAAS section of a DIGEST-MD5 server: one ``user_<name>`` per user."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    options = "".join(f"\n    user_{name}={quoted(password)}"
                      for name, password in users.items())
    _private(path)
    path.write_text(f"Server {{\n  {DIGEST_LOGIN_MODULE} required{options};\n}};\n")


class LocalZooKeeper:
    """One standalone server process listening on 127.0.0.1:``port``."""

    def __init__(self, port: int, data_dir: Path, log_path: Path,
                 process: subprocess.Popen[bytes], log_file: IO[bytes],
                 tls: ServerTls | None = None) -> None:
        self.port = port
        self.tls = tls
        self.data_dir = data_dir
        self.log_path = log_path
        self.process = process
        self._log_file = log_file

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def connect_string(self, chroot: str = "") -> str:
        return self.address + chroot

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout: float = START_DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        while not _ready(self.port, self.tls.probe if self.tls else None):
            if self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited at start (status {self.process.returncode}); "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper not ready on {self.address} in {timeout:.0f} s; "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def pause(self) -> None:
        """SIGSTOP the server: clients lose their connection (and later their sessions)."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL. Returns the exit status."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)  # a paused JVM cannot handle SIGTERM
                self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(grace)
        self._log_file.close()
        return self.process.returncode


def start_zookeeper(
    data_dir: Path,
    *,
    port: int | None = None,
    log_path: Path | None = None,
    tick_ms: int = DEFAULT_TICK_MS,
    force_sync: bool = True,
    max_session_timeout_ms: int | None = None,
    heap_mb: int = DEFAULT_HEAP_MB,
    timeout: float = START_DEADLINE_S,
    install: ZooKeeperInstall | None = None,
    sasl_users: Mapping[str, str] | None = None,
    tls: ServerTls | None = None,
) -> LocalZooKeeper:
    """Start a server on ``port`` (default: a free one) with its data and ``zoo.cfg`` in
    ``data_dir``, and return once it answers ``ruok``. The log goes to ``log_path``
    (default ``data_dir/zookeeper.log``); sessions may last up to ``max_session_timeout_ms``
    (default: ZooKeeper's 20 ticks). Raises :class:`ZooKeeperNotInstalled` or
    :class:`ZooKeeperStartError`; a server that failed to start is stopped. With
    ``sasl_users`` (name → password) clients authenticate with SASL DIGEST-MD5; with ``tls``
    the server has a TLS port only, and wants client certificates."""
    install = install or find_install()
    data_dir.mkdir(parents=True, exist_ok=True)
    chosen = port if port is not None else free_port()
    if port is not None and not port_free(port):
        # checked first: the readiness probe would otherwise talk to whoever holds the port
        raise ZooKeeperStartError(f"cannot start ZooKeeper: 127.0.0.1:{port} is in use")
    config = data_dir / "zoo.cfg"
    write_config(config, data_dir / "data", chosen, tick_ms, force_sync,
                 max_session_timeout_ms, sasl=bool(sasl_users), tls=tls)
    jaas_flags: list[str] = []
    if sasl_users:
        jaas = data_dir / "zookeeper_jaas.conf"
        write_server_jaas(jaas, sasl_users)
        jaas_flags.append(f"-Djava.security.auth.login.config={jaas}")
    log_path = log_path or data_dir / "zookeeper.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [str(install.java), f"-Xmx{heap_mb}m", *JVM_FLAGS, *jaas_flags, "-cp", install.classpath,
         MAIN_CLASS, str(config)],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = LocalZooKeeper(chosen, data_dir, log_path, process, log_file, tls)
    try:
        server.wait_ready(timeout)
    except BaseException:
        server.stop()
        raise
    return server

