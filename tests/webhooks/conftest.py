"""Real receivers on 127.0.0.1 for the webhook transport tests: HTTP, HTTPS, and misbehaving sockets."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A running server: what it answers, what it got, and a switch that releases hung handlers."""

    port: int
    scheme: str = "http"
    status: int = 200
    answer_headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    requests: list[Received] = field(default_factory=list)
    sni: list[str | None] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.requests.append(Received("POST", self.path, dict(self.headers.items()), body))
            if receiver.hang:
                receiver.release.wait()
                return
            payload = b'{"thanks": true}'
            self.send_response(receiver.status)
            for name, value in receiver.answer_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., Receiver]]:
    """Start HTTP(S) receivers on free ports of 127.0.0.1; all stopped at teardown."""
    running: list[tuple[ThreadingHTTPServer, threading.Thread, Receiver]] = []

    def start(*, tls: ssl.SSLContext | None = None, **behaviour: object) -> Receiver:
        receiver = Receiver(port=0, scheme="https" if tls else "http", **behaviour)  # type: ignore[arg-type]
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
        server.daemon_threads = True
        server.block_on_close = False
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: receiver.sni.append(name)
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        receiver.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        running.append((server, thread, receiver))
        return receiver

    yield start
    for server, thread, receiver in running:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port held by a bound socket that does not listen: connecting is refused, and nobody can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket that never accepts: the kernel completes the handshake, nobody ever answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def trickle_port() -> Iterator[int]:
    """Answers a status line, then one header byte every 0.1 s for ever: no single read ever times out."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not stop.wait(0.1):  # the pace of the slow peer, not a synchronisation
                try:
                    conn.sendall(b"a")
                except OSError:
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    thread.join(timeout=5)


@dataclass(frozen=True)
class Pki:
    """A throwaway CA and a server certificate for localhost, hook.test and 127.0.0.1."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self, tmp_path) -> ssl.SSLContext:
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))


@pytest.fixture(scope="session")
def pki() -> Pki:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rollout test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("hook.test"),
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pki(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
