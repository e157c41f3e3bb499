"""A small read-only Kubernetes API client for the collector's pod watch.

Not kubernetes-asyncio: importing it adds about 38 MB, past the collector's memory budget."""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from gpuscale.kube.errors import KubeError, error_from_response
from gpuscale.kubewatch import read_events

SERVICE_ACCOUNT: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S: Final = 60.0
REQUEST_TIMEOUT_S: Final = 30.0


class ConfigError(ValueError):
    """The credentials cannot be used; the message names the fix."""


@dataclass
class ApiConfig:
    server: str
    ssl: ssl.SSLContext | bool = True  # False: no TLS verification; True: http or default trust
    token: str | None = None
    token_file: Path | None = None
    basic: tuple[str, str] | None = None
    server_name: str | None = None  # tls-server-name: the name the certificate must carry
    _read_at: float = field(default=0.0, repr=False)

    def headers(self, now: float) -> dict[str, str]:
        if self.token_file is not None and (self.token is None or now - self._read_at > TOKEN_REREAD_S):
            try:
                self.token = self.token_file.read_text().strip()
                self._read_at = now
            except OSError as e:
                if self.token is None:
                    raise ConfigError(f"cannot read the token file {self.token_file}: {e}") from None
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic is not None:
            raw = f"{self.basic[0]}:{self.basic[1]}".encode()
            return {"Authorization": "Basic " + base64.b64encode(raw).decode()}
        return {}


def load_config(kubeconfig: Path | None, environ: Mapping[str, str] | None = None) -> ApiConfig:
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        return _from_kubeconfig(kubeconfig)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster(env)
    return _from_kubeconfig(Path.home() / ".kube" / "config")


def _in_cluster(env: Mapping[str, str]) -> ApiConfig:
    host, port = env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    ca = SERVICE_ACCOUNT / "ca.crt"
    try:
        context = ssl.create_default_context(cafile=str(ca))
    except OSError as e:
        raise ConfigError(f"in-cluster: cannot read the service account's CA {ca}: {e}") from None
    return ApiConfig(f"https://{host}:{port}", context, token_file=SERVICE_ACCOUNT / "token")


def _from_kubeconfig(path: Path) -> ApiConfig:
    import yaml  # lazy import: only a kubeconfig needs YAML

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read kubeconfig {path}: {e}") from None
    try:
        contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
        clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in doc.get("users") or []}
        current = contexts[doc.get("current-context") or next(iter(contexts))]
        cluster = clusters[current["cluster"]]
        user = users.get(current.get("user", ""), {})
        server = str(cluster["server"]).rstrip("/")
    except (KeyError, TypeError, AttributeError, StopIteration):
        raise ConfigError(f"kubeconfig {path} names no server for its current context") from None
    for unsupported in ("exec", "auth-provider"):
        if user.get(unsupported):
            raise ConfigError(
                f"kubeconfig {path}: its user authenticates with {unsupported!r}, which the collector "
                "does not run; give it a token, a token file or a client certificate (in a cluster the "
                "collector uses its service account)"
            )
    base = path.parent
    context: ssl.SSLContext | bool = True
    if urlsplit(server).scheme == "https":
        context = False if cluster.get("insecure-skip-tls-verify") else _tls(cluster, user, base)
    token = user.get("token")
    token_file = user.get("tokenFile")
    basic = (str(user["username"]), str(user.get("password", ""))) if user.get("username") else None
    return ApiConfig(
        server,
        context,
        token=str(token) if token else None,
        token_file=_resolve(base, token_file) if token_file else None,
        basic=basic,
        server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
    )


def _resolve(base: Path, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else base / p


def _tls(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    try:
        if cluster.get("certificate-authority-data"):
            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            context = ssl.create_default_context(cadata=pem)
        elif cluster.get("certificate-authority"):
            context = ssl.create_default_context(cafile=str(_resolve(base, cluster["certificate-authority"])))
        else:
            context = ssl.create_default_context()
        cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
        if cert is not None and key is not None:
            with tempfile.TemporaryDirectory(prefix="gpuscale-kubeconfig-") as tmp:
                cert_file, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert_file.write_bytes(cert)
                key_file.write_bytes(key)
                key_file.chmod(0o600)
                context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ValueError, ssl.SSLError) as e:
        raise ConfigError(f"kubeconfig TLS settings cannot be used: {e}") from None
    return context


def _pem(user: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if user.get(f"{key}-data"):
        return base64.b64decode(user[f"{key}-data"])
    if user.get(key):
        return _resolve(base, user[key]).read_bytes()
    return None


class KubeApi:
    """GET JSON and watch streams from one API server; a failed answer raises its
    :class:`gpuscale.kube.errors.KubeError`."""

    def __init__(self, config: ApiConfig | Callable[[], ApiConfig]) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    @property
    def config(self) -> ApiConfig:
        """Loaded at the first request: a :class:`ConfigError` fails that request, and the next tries again."""
        if not isinstance(self._config, ApiConfig):
            self._config = self._config()
        return self._config

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"Accept": "application/json", "User-Agent": "gpuscale-collector"}
            )
        return self._session

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        async with self._http().get(
            self.config.server + path,
            params=params,
            headers=self.config.headers(time.monotonic()),
            ssl=self.config.ssl,
            server_hostname=self.config.server_name,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        ) as resp:
            body = await resp.read()
            if resp.status >= 400:
                raise _status_error(resp, body)
            return json.loads(body)

    async def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events (``{"type", "object"}``) until the server ends the stream;
        an ERROR event raises its status (410 :class:`~gpuscale.kube.errors.Gone`: relist)."""
        async with self._http().get(
            self.config.server + path,
            params={**params, "watch": "true"},
            headers=self.config.headers(time.monotonic()),
            ssl=self.config.ssl,
            server_hostname=self.config.server_name,
            timeout=aiohttp.ClientTimeout(total=None, connect=REQUEST_TIMEOUT_S, sock_read=read_timeout_s),
        ) as resp:
            if resp.status >= 400:
                raise _status_error(resp, await resp.read())
            async for event in read_events(resp.content.iter_any()):
                yield event

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _status_error(resp: aiohttp.ClientResponse, body: bytes) -> KubeError:
    return error_from_response(resp.status, body.decode("utf-8", errors="replace"), resp.headers)
