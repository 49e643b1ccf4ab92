"""A TCP proxy on loopback that can stall or cut its connections: a database (or any server) that accepted and then
never answers, or whose connections drop, for the fault tests.

``StallProxy(target_port)`` forwards each connection to ``stall_proxy.port`` to the target, bytes both ways, on
daemon threads of its own. ``stall`` stops every connection, open or new, forwarding any byte it receives after the
call, in either direction, with every socket left open; ``resume`` delivers what was held and forwards again; ``cut``
closes every open connection; ``close`` (or the ``with`` block's end) closes them all and stops the proxy.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

CHUNK = 64 * 1024


class _Link:
    """One client connection and its connection to the target, and how many of its two directions still run."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.cut = False
        self.running = 2

    def shut(self) -> None:
        """End both connections, waking their pumps from a blocked ``recv`` or ``sendall`` (a ``close`` from another
        thread would not)."""
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected any more


class StallProxy:
    """A TCP proxy from ``127.0.0.1:port`` to ``target_host:target_port`` that can stall, resume and cut."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._state = threading.Condition()  # guards everything below; pumps wait on it while stalled
        self._flowing = True
        self._closed = False
        self._links: set[_Link] = set()
        self._pumps: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name=f"stall-proxy-{self.port}", daemon=True)
        self._acceptor.start()

    def stall(self) -> None:
        """Forward no more bytes, in either direction, on any connection (new ones are accepted and get nothing)."""
        with self._state:
            self._flowing = False

    def resume(self) -> None:
        """Forward again, held bytes first."""
        with self._state:
            self._flowing = True
            self._state.notify_all()

    def cut(self) -> None:
        """Close every open connection (the proxy keeps accepting new ones)."""
        with self._state:
            for link in self._links:
                link.cut = True
                link.shut()
            self._state.notify_all()

    def close(self) -> None:
        """Close every connection and stop accepting, and wait for the proxy's threads to end."""
        with self._state:
            self._closed = True
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux); a close would not
        self._acceptor.join()
        self.cut()
        for pump in self._pumps:
            pump.join()
        self._listener.close()

    def __enter__(self) -> StallProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()  # the target refused: so does the proxy
                continue
            link = _Link(client, upstream)
            with self._state:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._links.add(link)
                self._pumps = [pump for pump in self._pumps if pump.is_alive()]
                for source, sink in ((client, upstream), (upstream, client)):
                    pump = threading.Thread(
                        target=self._pump, args=(link, source, sink), name=self._acceptor.name, daemon=True
                    )
                    self._pumps.append(pump)
                    pump.start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        """Forward ``source``'s bytes to ``sink`` while flowing, its end of stream (a half-close) included, until
        either fails or the link is cut; the last of the link's two pumps closes its sockets."""
        try:
            while True:
                data = source.recv(CHUNK)
                with self._state:
                    self._state.wait_for(lambda: self._flowing or link.cut)
                    if link.cut:
                        return
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
        except OSError:
            with self._state:
                link.cut = True
                link.shut()
                self._state.notify_all()
        finally:
            with self._state:
                link.running -= 1
                if link.running == 0:
                    self._links.discard(link)
                    link.client.close()
                    link.upstream.close()
