"""A real HTTPS server on loopback for the import tests: the remote an import fetches from.

`CertificateAuthority` makes a certificate authority and a server certificate for `localhost`, `media.test`, 127.0.0.1 and ::1
with the `cryptography` package; a vidforge server trusts it through the standard `SSL_CERT_FILE` of its process.
`Origin` serves it (http.server in a thread, TLS by the `ssl` module) on one loopback address, answering each path
the way a test set it (a file, a redirect, a refusal, a length past a limit, a stall), and records what it was asked:
the path, the Host header, the TLS server name and the address the connection came to. Every answer of its own
carries `SECRET` in a header and in the body, so a test can show that none of it reaches an error.

Each connection's TLS handshake runs in that connection's own thread, within `HANDSHAKE_S`: a client that goes
silent mid-handshake holds up neither the other connections nor `stop`, as it would if the listening thread did the
handshake as it accepts. `SilentTls` is the other side of that: a host that stalls every handshake, which tells
whether a client cancelled there closed its connection.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SECRET = "remote-secret-7f3a9c"  # in every header block and body the origin sends of its own
NAMES = ("localhost", "media.test")
ADDRESSES = ("127.0.0.1", "::1")
HANDSHAKE_S = 30  # a client silent for this long mid-handshake is dropped


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A CA (`ca_file`, what a client trusts) and the server's certificate and key it signed."""

    def __init__(self, folder: Path) -> None:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (
            x509.CertificateBuilder()
            .subject_name(_name("vidforge test CA"))
            .issuer_name(_name("vidforge test CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        sans = [x509.DNSName(n) for n in NAMES] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ADDRESSES]
        leaf = (
            x509.CertificateBuilder()
            .subject_name(_name("media.test"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        folder.mkdir(parents=True, exist_ok=True)
        self.ca_file = folder / "ca.pem"
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert_file = folder / "server.pem"
        self.cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        self.key_file = folder / "server.key"
        self.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


@dataclass(frozen=True)
class Answer:
    """How the origin answers a path: `status`, with `body` (its length declared, unless `declared` says another
    length or `chunked`), `location` for a redirect; `stall` holds the body back until the origin stops."""

    status: int = 200
    body: bytes = b""
    location: str | None = None
    declared: int | None = None
    chunked: bool = False
    stall: bool = False


@dataclass(frozen=True)
class Seen:
    path: str
    host: str | None  # the Host header
    server_name: str | None  # the TLS server name (SNI) the client sent
    local_address: str  # the address the connection came to


@dataclass
class Origin:
    """An HTTPS (or, with `ca` None, plain HTTP) server on `address`, a free port."""

    address: str = "127.0.0.1"
    ca: CertificateAuthority | None = None
    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._released = threading.Event()
        self._names: dict[int, str | None] = {}  # id of an SSL object -> the server name it was asked for
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                if isinstance(self.request, ssl.SSLSocket):
                    self.request.settimeout(HANDSHAKE_S)
                    self.request.do_handshake()
                    self.request.settimeout(None)
                super().setup()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                origin.serve(self)

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in self.address else socket.AF_INET

            def handle_error(self, request: object, client_address: object) -> None:
                # A client that refuses this server's certificate (the tests of an untrusted origin) hangs up in the
                # handshake: expected, not a traceback on the test run's output.
                if not isinstance(sys.exc_info()[1], ssl.SSLError | ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server((self.address, 0), Handler)
        self.server.daemon_threads = True
        if self.ca is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.ca.cert_file), str(self.ca.key_file))
            context.sni_callback = lambda sock, name, _ctx: self._names.__setitem__(id(sock), name)
            self.server.socket = context.wrap_socket(
                self.server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str, host: str | None = None) -> str:
        scheme = "https" if self.ca is not None else "http"
        shown = host or (f"[{self.address}]" if ":" in self.address else self.address)
        return f"{scheme}://{shown}:{self.port}{path}"

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        connection = handler.connection
        name = self._names.get(id(connection)) if isinstance(connection, ssl.SSLSocket) else None
        self.seen.append(Seen(handler.path, handler.headers.get("Host"), name, connection.getsockname()[0]))
        answer = self.answers.get(handler.path, Answer(404, f"not here {SECRET}".encode()))
        handler.send_response(answer.status)
        handler.send_header("X-Origin-Secret", SECRET)
        if answer.location is not None:
            handler.send_header("Location", answer.location)
        if answer.chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        else:
            handler.send_header("Content-Length", str(answer.declared or len(answer.body)))
        handler.end_headers()
        try:
            if answer.stall:
                handler.wfile.flush()
                self._released.wait()
                return
            if answer.chunked:
                for start in range(0, len(answer.body), 65536):
                    part = answer.body[start : start + 65536]
                    handler.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                handler.wfile.write(b"0\r\n\r\n")
            else:
                handler.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client stopped reading: what an import past a limit does
        handler.close_connection = True

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]

    def stop(self) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()


class SilentTls:
    """A host that takes connections and never says a word of TLS: what a fetch meets at a server that stalls its
    handshake on purpose."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.listener.accept()[0])
            except OSError:  # closed
                return

    def open_to_it(self) -> int:
        """How many of this process's sockets are still connected to it."""
        return sum(1 for connection in self.accepted if _peer_still_there(connection))

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


def _peer_still_there(connection: socket.socket) -> bool:
    """Whether the client end of `connection` is still open: past what it sent (its TLS hello), a closed one reads
    as the end of the stream, an open one has nothing more to read."""
    connection.setblocking(False)
    try:
        while connection.recv(65536):
            pass
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
