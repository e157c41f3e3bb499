"""TLS of both ports: who may call, and the certificates shown."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import time
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SELF_SIGNED_DAYS = 365


def write_self_signed(directory: Path, common_name: str, dns_names: list[str]) -> tuple[Path, Path]:
    """A new EC P-256 key and a certificate for ``dns_names`` and 127.0.0.1, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names)]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def default_dns_names() -> list[str]:
    return ["localhost", socket.gethostname()]


def server_context(cert_file: Path, key_file: Path, client_ca_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    if client_ca_file is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=str(client_ca_file))
    return context


def peer_common_name(peercert: object) -> str | None:
    """The subject common name of a verified peer certificate (``ssl``'s dict form), if any."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class GrpcCertificates:
    """The gRPC port's certificate, its key and the client CA, re-read when a file changes.

    cert-manager renews by swapping files; a half-written set keeps the one in use."""

    def __init__(
        self, cert_file: Path, key_file: Path, client_ca_file: Path, check_every_s: float = 30.0
    ) -> None:
        self.files = (cert_file, key_file, client_ca_file)
        self.check_every_s = check_every_s
        self.loads = 0
        self._stamp = self._stamps()
        self._checked = time.monotonic()
        self.initial = self._configuration()

    def _stamps(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in (f.stat() for f in self.files))

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        cert, key, ca = (f.read_bytes() for f in self.files)
        public = x509.load_pem_x509_certificate(cert).public_key()
        if public != serialization.load_pem_private_key(key, password=None).public_key():
            raise ValueError("the certificate and the key do not match (caught mid-swap)")
        x509.load_pem_x509_certificates(ca)  # a CA file that does not parse is not taken either
        self.loads += 1
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed, else None (keep)."""
        now = time.monotonic()
        if 0.0 <= now - self._checked < self.check_every_s:
            return None
        self._checked = now
        try:
            stamp = self._stamps()
            if stamp == self._stamp:
                return None
            configuration = self._configuration()
        except (OSError, ValueError):
            return None  # mid-swap or unreadable: keep serving the one in use
        self._stamp = stamp
        return configuration

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.initial, self.fetch, require_client_authentication=True
        )
