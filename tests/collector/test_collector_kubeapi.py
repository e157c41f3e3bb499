"""The collector's small API client (kubeconfig and in-cluster credentials,
GET and watch) against real HTTPS servers: a CA and a client certificate made
here, a server that demands them, and the API's own error shapes."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpuscale.kube.errors import KubeError as ApiStatus
from gpuscale_collector import kubeapi
from gpuscale_collector.kubeapi import ConfigError, KubeApi, load_config


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str, key: Any, issuer: tuple[str, Any] | None, *, ca: bool, san: str | None = None
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san is not None:
        import ipaddress

        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(san))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return bytes(
        obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


class Pki:
    def __init__(self, tmp: Path) -> None:
        self.ca_key = _key()
        self.ca = _cert("kube-ca", self.ca_key, None, ca=True)
        self.server_key = _key()
        self.server = _cert("apiserver", self.server_key, ("kube-ca", self.ca_key), ca=False, san="127.0.0.1")
        self.client_key = _key()
        self.client = _cert("system:node:gpu-node-1", self.client_key, ("kube-ca", self.ca_key), ca=False)
        (tmp / "server.pem").write_bytes(_pem(self.server))
        (tmp / "server.key").write_bytes(_pem(self.server_key))
        (tmp / "ca.pem").write_bytes(_pem(self.ca))
        self.tmp = tmp

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.tmp / "ca.pem"))
        context.load_cert_chain(str(self.tmp / "server.pem"), str(self.tmp / "server.key"))
        context.verify_mode = ssl.CERT_REQUIRED
        return context


PODS = {
    "kind": "PodList",
    "metadata": {"resourceVersion": "42"},
    "items": [{"metadata": {"name": "p", "uid": "u"}}],
}


@asynccontextmanager
async def api_server(context: ssl.SSLContext | None, seen: list[dict[str, str]]) -> AsyncIterator[str]:
    async def pods(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            await resp.prepare(request)
            for event in (
                {"type": "ADDED", "object": PODS["items"][0]},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "43"}}},
                {
                    "type": "ERROR",
                    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
                },
            ):
                await resp.write(json.dumps(event).encode() + b"\n")
            return resp
        return web.json_response(PODS)

    async def missing(_request: web.Request) -> web.Response:
        body = {
            "kind": "Status",
            "status": "Failure",
            "reason": "NotFound",
            "message": 'replicasets "x" not found',
            "code": 404,
        }
        return web.json_response(body, status=404)

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    app.router.add_get("/apis/apps/v1/namespaces/default/replicasets/x", missing)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # the bound port
    try:
        yield f"{'https' if context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


async def test_client_certificate_and_ca_from_kubeconfig_data(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    seen: list[dict[str, str]] = []
    async with api_server(pki.server_context(), seen) as url:
        config = load_config(
            kubeconfig(
                tmp_path / "kubeconfig",
                {"server": url, "certificate-authority-data": base64.b64encode(_pem(pki.ca)).decode()},
                {
                    "client-certificate-data": base64.b64encode(_pem(pki.client)).decode(),
                    "client-key-data": base64.b64encode(_pem(pki.client_key)).decode(),
                },
            )
        )
        api = KubeApi(config)
        try:
            assert (await api.get("/api/v1/pods"))["metadata"]["resourceVersion"] == "42"
            with pytest.raises(ApiStatus) as gone:
                async for _event in api.watch("/api/v1/pods", {"resourceVersion": "42"}, read_timeout_s=5):
                    pass
            assert (gone.value.status, gone.value.reason) == (410, "Expired")
            with pytest.raises(ApiStatus) as missing:
                await api.get("/apis/apps/v1/namespaces/default/replicasets/x")
            assert (missing.value.status, missing.value.reason) == (404, "NotFound")
        finally:
            await api.close()
    assert "Authorization" not in seen[0]


async def test_a_server_the_ca_did_not_sign_is_refused(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    other = _cert("other-ca", _key(), None, ca=True)
    async with api_server(pki.server_context(), []) as url:
        config = load_config(
            kubeconfig(
                tmp_path / "kubeconfig",
                {"server": url, "certificate-authority-data": base64.b64encode(_pem(other)).decode()},
                {
                    "client-certificate-data": base64.b64encode(_pem(pki.client)).decode(),
                    "client-key-data": base64.b64encode(_pem(pki.client_key)).decode(),
                },
            )
        )
        api = KubeApi(config)
        try:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await api.get("/api/v1/pods")
        finally:
            await api.close()


async def test_token_and_relative_token_file_from_kubeconfig(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    async with api_server(None, seen) as url:
        api = KubeApi(load_config(kubeconfig(tmp_path / "kc", {"server": url}, {"token": "abc"})))
        try:
            await api.get("/api/v1/pods")
        finally:
            await api.close()
        (tmp_path / "token").write_text("from-file\n")
        api = KubeApi(load_config(kubeconfig(tmp_path / "kc2", {"server": url}, {"tokenFile": "token"})))
        try:
            await api.get("/api/v1/pods")
        finally:
            await api.close()
    assert [h["Authorization"] for h in seen] == ["Bearer abc", "Bearer from-file"]


def test_in_cluster_reads_the_service_account_and_rereads_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = Pki(tmp_path)
    account = tmp_path / "sa"
    account.mkdir()
    (account / "ca.crt").write_bytes(_pem(pki.ca))
    (account / "token").write_text("first")
    monkeypatch.setattr(kubeapi, "SERVICE_ACCOUNT", account)
    config = load_config(None, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert config.server == "https://10.96.0.1:443"
    assert isinstance(config.ssl, ssl.SSLContext)
    assert config.headers(100.0) == {"Authorization": "Bearer first"}
    (account / "token").write_text("rotated")
    assert config.headers(100.0 + kubeapi.TOKEN_REREAD_S / 2) == {"Authorization": "Bearer first"}
    assert config.headers(100.0 + kubeapi.TOKEN_REREAD_S + 1) == {"Authorization": "Bearer rotated"}


@pytest.mark.parametrize(
    ("user", "cluster", "problem"),
    [
        ({"exec": {"command": "gke-gcloud-auth-plugin"}}, {"server": "https://x"}, "'exec'"),
        ({"auth-provider": {"name": "oidc"}}, {"server": "https://x"}, "'auth-provider'"),
        ({}, {}, "names no server"),
        ({}, {"server": "https://x", "certificate-authority": "no-such-ca.pem"}, "TLS settings"),
    ],
)
def test_kubeconfigs_the_collector_cannot_use_say_why(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_config(kubeconfig(tmp_path / "kubeconfig", cluster, user))


def test_insecure_skip_tls_verify_and_basic_auth(tmp_path: Path) -> None:
    config = load_config(
        kubeconfig(
            tmp_path / "kc",
            {"server": "https://h:6443", "insecure-skip-tls-verify": True},
            {"username": "a", "password": "b"},
        )
    )
    assert config.ssl is False
    assert config.headers(0.0) == {"Authorization": "Basic " + base64.b64encode(b"a:b").decode()}
