"""keda-scaler options: every one a flag and an environment variable (docs/ARCHITECTURE.md#options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import (
    CommonSettings,
    boolean,
    existing_file,
    http_port_option,
    option,
    port,
    positive_int,
    seconds,
)


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of certificate common names (empty: none named)."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


@dataclass(frozen=True)
class KedaScalerSettings(CommonSettings):
    http_port: int = http_port_option(9404)
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
    grpc_tls_cert_file: Path | None = option(
        None,
        "--grpc-tls-cert-file",
        env="GPUSCALE_GRPC_TLS_CERT_FILE",
        parse=existing_file,
        help="serving certificate of the gRPC port (PEM; its names must include the scalerAddress "
        "host); re-read when it changes",
        metavar="FILE",
    )
    grpc_tls_private_key_file: Path | None = option(
        None,
        "--grpc-tls-private-key-file",
        env="GPUSCALE_GRPC_TLS_PRIVATE_KEY_FILE",
        parse=existing_file,
        help="private key of --grpc-tls-cert-file (PEM)",
        metavar="FILE",
    )
    grpc_client_ca_file: Path | None = option(
        None,
        "--grpc-client-ca-file",
        env="GPUSCALE_GRPC_CLIENT_CA_FILE",
        parse=existing_file,
        help="the gRPC port requires a client certificate signed by this CA (KEDA's, given to it by a "
        "TriggerAuthentication's tlsClientCert)",
        metavar="FILE",
    )
    grpc_plaintext: bool = option(
        False,
        "--grpc-plaintext",
        env="GPUSCALE_GRPC_PLAINTEXT",
        parse=boolean,
        is_flag=True,
        help="UNSAFE: serve gRPC without TLS, to any caller that reaches the port (then any pod may "
        "read any namespace's metrics); instead of the three --grpc-* files",
    )
    max_streams: int = option(
        1024,
        "--max-streams",
        env="GPUSCALE_MAX_STREAMS",
        parse=positive_int,
        help="open StreamIsActive/StreamMetricSpec streams at most, in all; more are RESOURCE_EXHAUSTED",
    )
    max_streams_per_namespace: int = option(
        64,
        "--max-streams-per-namespace",
        env="GPUSCALE_MAX_STREAMS_PER_NAMESPACE",
        parse=positive_int,
        help="open streams at most for the ScaledObjects of one namespace",
    )
    external_metrics_api: bool = option(
        False,
        "--external-metrics-api",
        env="GPUSCALE_EXTERNAL_METRICS_API",
        parse=boolean,
        is_flag=True,
        help="serve the external metrics API on --api-port (needs --client-ca-file)",
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
        help="the external metrics API requires a client certificate signed by this CA: the API "
        "server's front-proxy CA (extension-apiserver-authentication: requestheader-client-ca-file)",
        metavar="FILE",
    )
    requestheader_allowed_names: tuple[str, ...] = option(
        (),
        "--requestheader-allowed-names",
        env="GPUSCALE_REQUESTHEADER_ALLOWED_NAMES",
        parse=names,
        help="common names the external metrics API's client certificate may have, comma-separated "
        "(extension-apiserver-authentication: requestheader-allowed-names); none: any the CA signed",
        metavar="NAMES",
    )
    api_any_client: bool = option(
        False,
        "--api-any-client",
        env="GPUSCALE_API_ANY_CLIENT",
        parse=boolean,
        is_flag=True,
        help="UNSAFE: serve the external metrics API to callers without a client certificate "
        "(then any pod may read any namespace's metrics); instead of --client-ca-file",
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
        if self.max_streams_per_namespace > self.max_streams:
            raise ValueError("--max-streams-per-namespace must not exceed --max-streams")
        busy = [p for p in (self.http_port, self.grpc_port, self.api_port) if p != 0]
        if len(busy) != len(set(busy)):
            raise ValueError(
                f"--http-port, --grpc-port and --api-port must differ "
                f"(got {self.http_port}, {self.grpc_port}, {self.api_port})"
            )

    def unauthenticated_problems(self) -> list[tuple[str, str]]:
        """Why this would serve callers it cannot identify, as (option, message); [] if it would not.
        Checked at start, not at build: every other command may build these settings bare."""
        problems: list[tuple[str, str]] = []
        grpc_files = (self.grpc_tls_cert_file, self.grpc_tls_private_key_file, self.grpc_client_ca_file)
        if self.grpc_plaintext:
            if any(f is not None for f in grpc_files):
                problems.append(("--grpc-plaintext", "the --grpc-* certificate files ask for TLS"))
        elif any(f is None for f in grpc_files):
            problems.append(
                (
                    "--grpc-client-ca-file",
                    "the gRPC port needs --grpc-tls-cert-file, --grpc-tls-private-key-file and "
                    "--grpc-client-ca-file (KEDA's client CA); --grpc-plaintext serves any caller",
                )
            )
        if self.external_metrics_api and self.client_ca_file is None and not self.api_any_client:
            problems.append(
                (
                    "--client-ca-file",
                    "the external metrics API needs the API server's front-proxy CA "
                    "(requestheader-client-ca-file); --api-any-client serves any caller",
                )
            )
        return problems
