"""A port `vidforge serve` cannot listen on, said in one line that names it and the way to pick another.

Checked twice: before Ray starts (`check_port`: a second, not a minute, and no traceback), and where the ingress
replicas bind (serve_app.launch.deployment): another program may take the port in between, and on a cluster that
`vidforge serve` joined the replicas bind on the head, which this check cannot see.
"""

from __future__ import annotations

import errno
import re
import socket

BIND_ERRORS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})  # what a listener's bind fails with

# How a replica's refusal reads in the deployment's status message (a traceback's last line): the one line again.
_REPLICA_REFUSAL = re.compile(r"PortUnavailable: (?P<line>.+)$", re.MULTILINE)


class PortUnavailable(Exception):
    """(host, port) cannot be listened on; the message is the one line an operator reads."""

    def __init__(self, host: str, port: int, cause: OSError | str) -> None:
        self.host, self.port = host, port
        super().__init__(_line(host, port, cause) if isinstance(cause, OSError) else cause)

    @classmethod
    def from_status(cls, host: str, port: int, status_message: str) -> PortUnavailable | None:
        """The refusal a replica raised, found in Serve's status message of the failed deployment; None if the
        deployment failed for another reason."""
        found = _REPLICA_REFUSAL.search(status_message)
        return cls(host, port, found["line"].strip()) if found else None


def _line(host: str, port: int, err: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if err.errno == errno.EADDRINUSE:
        return (
            f"{where} is already in use by another program; pick another port with `vidforge serve --port N` "
            "(or `make serve PORT=N`)"
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {where}: no network interface of this machine has the address {host}; pick another "
            "with `vidforge serve --host ADDRESS` (or `make serve HOST=ADDRESS`)"
        )
    return (
        f"cannot listen on {where}: {err.strerror or err}; pick another port with `vidforge serve --port N` "
        "(or `make serve PORT=N`)"
    )


def check_port(host: str, port: int) -> None:
    """Raise PortUnavailable unless a listener could be opened on (host, port) now (`listen_error`)."""
    if (err := listen_error(host, port)) is not None:
        raise PortUnavailable(host, port, err)


def listen_error(host: str, port: int) -> OSError | None:
    """Why a listener could not be opened on (host, port) now; None if it could. Without SO_REUSEPORT, unlike the
    replicas' listeners: a port another `vidforge serve` of this user holds counts as taken, where the replicas
    would silently share it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed listener's TIME_WAIT is no owner
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError as err:
            return err
    return None
