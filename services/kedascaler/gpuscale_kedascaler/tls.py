"""The external metrics API's TLS: the mounted certificate, or a self-signed one.

As metrics-server and prometheus-adapter do without a mounted certificate,
the keda-scaler then makes a self-signed one at start (the APIService then
needs ``insecureSkipTLSVerify: true``, or mount a certificate and give the
APIService its ``caBundle``). With ``--client-ca-file`` only clients holding
a certificate of that CA (the API server's front proxy) are let in.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from pathlib import Path

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
