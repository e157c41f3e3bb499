"""keda-scaler options: every one a flag and an environment variable (DESIGN.md §2, §8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import CommonSettings, existing_file, option, port, seconds


@dataclass(frozen=True)
class KedaScalerSettings(CommonSettings):
    http_port: int = option(
        9404,
        "--http-port",
        env="GPUSCALE_HTTP_PORT",
        parse=port,
        help="HTTP port for /metrics, /healthz, /readyz",
    )
    grpc_port: int = option(
        9500,
        "--grpc-port",
        env="GPUSCALE_GRPC_PORT",
        parse=port,
        help="port of KEDA's externalscaler.ExternalScaler gRPC service (a trigger's scalerAddress)",
    )
    api_port: int = option(
        6443,
        "--api-port",
        env="GPUSCALE_API_PORT",
        parse=port,
        help="HTTPS port of the external metrics API (external.metrics.k8s.io/v1beta1, behind an APIService)",
    )
    tls_cert_file: Path | None = option(
        None,
        "--tls-cert-file",
        env="GPUSCALE_TLS_CERT_FILE",
        parse=existing_file,
        help="serving certificate of the external metrics API (PEM); none: a self-signed one is made at start",
        metavar="FILE",
    )
    tls_private_key_file: Path | None = option(
        None,
        "--tls-private-key-file",
        env="GPUSCALE_TLS_PRIVATE_KEY_FILE",
        parse=existing_file,
        help="private key of --tls-cert-file (PEM)",
        metavar="FILE",
    )
    client_ca_file: Path | None = option(
        None,
        "--client-ca-file",
        env="GPUSCALE_CLIENT_CA_FILE",
        parse=existing_file,
        help="require client certificates signed by this CA on the external metrics API "
        "(the API server's front-proxy CA: requestheader-client-ca-file); none: any client",
        metavar="FILE",
    )
    max_metrics_age: float = option(
        10.0,
        "--max-metrics-age",
        env="GPUSCALE_MAX_METRICS_AGE",
        parse=seconds,
        help="serve a workload's averages only while its last metrics message is at most this old (seconds)",
    )

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_private_key_file is None):
            raise ValueError("--tls-cert-file and --tls-private-key-file go together")
        busy = [p for p in (self.http_port, self.grpc_port, self.api_port) if p != 0]
        if len(busy) != len(set(busy)):
            raise ValueError(
                f"--http-port, --grpc-port and --api-port must differ "
                f"(got {self.http_port}, {self.grpc_port}, {self.api_port})"
            )
