"""Certificates for the keda-scaler's two TLS ports, made with ``cryptography`` as an install
(cert-manager) and a cluster (its front-proxy CA) would make them.

- the gRPC CA signs the keda-scaler's serving certificate (named as its Service) and KEDA's
  client certificate (what a ClusterTriggerAuthentication hands KEDA);
- the front-proxy CA signs the kube-aggregator's client certificate
  (``requestheader-client-ca-file``, CN ``front-proxy-client``);
- a stranger's CA signs a client certificate nobody trusts.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_NAME = "gpuscale-keda-scaler.gpuscale.svc"


def make_cert(
    name: str,
    key: Any,
    issuer: tuple[x509.Name, Any] | None,
    *,
    ca: bool,
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName(SERVICE_NAME),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write_pair(directory: Path, name: str, cert: x509.Certificate, key: Any) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def new_key() -> Any:
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True)
class Authority:
    """A CA on disk that can sign more."""

    name: x509.Name
    key: Any
    cert_file: Path
    directory: Path

    def issue(self, common_name: str, *, server: bool = False, client: bool = False) -> tuple[Path, Path]:
        key = new_key()
        cert = make_cert(common_name, key, (self.name, self.key), ca=False, server=server, client=client)
        return write_pair(self.directory, f"{self.cert_file.stem}-{common_name}", cert, key)


def authority(directory: Path, common_name: str) -> Authority:
    key = new_key()
    cert = make_cert(common_name, key, None, ca=True)
    cert_file, _ = write_pair(directory, common_name, cert, key)
    return Authority(cert.subject, key, cert_file, directory)


@dataclass(frozen=True)
class Pki:
    grpc_ca: Authority
    server: tuple[Path, Path]  # the keda-scaler's serving certificate (both ports)
    keda: tuple[Path, Path]  # KEDA's client certificate
    front_proxy_ca: Authority
    front_proxy: tuple[Path, Path]  # the kube-aggregator's client certificate
    stranger: tuple[Path, Path]  # signed by a CA nobody here trusts

    def grpc_options(self) -> dict[str, str]:
        return {
            "grpc_tls_cert_file": str(self.server[0]),
            "grpc_tls_private_key_file": str(self.server[1]),
            "grpc_client_ca_file": str(self.grpc_ca.cert_file),
        }

    def api_options(self) -> dict[str, str]:
        return {
            "external_metrics_api": "true",
            "tls_cert_file": str(self.server[0]),
            "tls_private_key_file": str(self.server[1]),
            "client_ca_file": str(self.front_proxy_ca.cert_file),
        }


def make_pki(directory: Path) -> Pki:
    grpc_ca = authority(directory, "gpuscale-keda-scaler-ca")
    front_proxy_ca = authority(directory, "front-proxy-ca")
    stranger_ca = authority(directory, "stranger-ca")
    return Pki(
        grpc_ca=grpc_ca,
        server=grpc_ca.issue("gpuscale-keda-scaler", server=True),
        keda=grpc_ca.issue("keda-operator", client=True),
        front_proxy_ca=front_proxy_ca,
        front_proxy=front_proxy_ca.issue("front-proxy-client", client=True),
        stranger=stranger_ca.issue("keda-operator", client=True),
    )


@functools.cache
def shared_pki() -> Pki:
    """One set for the whole session (making keys is the slow part), in its own directory."""
    return make_pki(Path(tempfile.mkdtemp(prefix="gpuscale-test-pki-")))


def grpc_channel(
    port: int, client: tuple[Path, Path] | None, pki: Pki | None = None, *, trust: Path | None = None
) -> grpc.aio.Channel:
    """A channel as KEDA opens one: TLS to the Service's name, with ``client``'s certificate."""
    pki = pki or shared_pki()
    root = (trust or pki.grpc_ca.cert_file).read_bytes()
    if client is None:
        credentials = grpc.ssl_channel_credentials(root_certificates=root)
    else:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=client[1].read_bytes(),
            certificate_chain=client[0].read_bytes(),
        )
    return grpc.aio.secure_channel(
        f"127.0.0.1:{port}", credentials, options=[("grpc.ssl_target_name_override", SERVICE_NAME)]
    )
