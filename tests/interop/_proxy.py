"""A TCP proxy that can cut a broker off the network (the fault harness's partitions).

A :class:`Proxy` listens on its own loopback port and forwards every connection to a
target port, one thread per direction. :meth:`Proxy.cut` drops every connection it
carries and refuses new ones (accepted, then closed at once, as a peer behind a dropped
link looks to a client once its TCP connection resets); :meth:`Proxy.heal` lets traffic
through again. Brokers advertise the proxy's port, so clients and the other brokers'
fetchers reach a broker only through it; its ZooKeeper connection may go through another.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Proxy"]


class Proxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self._server = socket.create_server((host, 0))
        self.port: int = self._server.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"proxy-{self.port}")
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`heal`."""
        self._cut.set()
        self._drop_all()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        """Stop accepting, drop every connection, and wait for the accepting thread. The
        listening socket is shut down before it is closed: on Linux, closing a socket
        does not wake a thread blocked in its accept(), which went on accepting (the
        kernel socket was still referenced) and its thread outlived the test."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._drop_all()
        self._thread.join(10)

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
            except OSError:
                client.close()  # the broker is down: as it would look without the proxy
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self._cut.is_set():
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
