"""The external metrics API (external.metrics.k8s.io/v1beta1) over HTTPS, called as the
kube-apiserver's aggregation layer calls an APIService's backend.

The HPA controller asks through the API server with k8s.io/metrics' external
metrics client: ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/<metric>
?labelSelector=<the metric's selector>``; the aggregator proxies that request
to the Service behind the APIService, over TLS, presenting its front-proxy
client certificate, and checks availability with a GET of the group-version
(discovery). These tests send exactly those requests: with aiohttp, and with the
real kubectl (``get --raw``) as an independent client, holding a front-proxy client
certificate of the test PKI (tests/kedascaler/certs.py), as the aggregator does.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.subjects import WorkloadKey

from ..waiting import eventually
from .certs import make_cert, new_key, shared_pki, write_pair
from .harness import RunningScaler, metrics_payload, running_scaler, settings_for

pytestmark = pytest.mark.integration

BASE = "/apis/external.metrics.k8s.io/v1beta1"
KUBECTL = shutil.which("kubectl")


def api_settings(nats_url: str, **options: str) -> Any:
    return settings_for(nats_url, **{**shared_pki().api_options(), **options})


@pytest.fixture
async def scaler(nats_server: EmbeddedNats) -> AsyncIterator[RunningScaler]:
    async with running_scaler(api_settings(nats_server.url)) as running:
        yield running


def client(cert: tuple[Path, Path] | None, trusted: Path | None = None) -> ssl.SSLContext:
    """A client context that verifies the scaler's serving certificate and shows ``cert``."""
    context = ssl.create_default_context(cafile=str(trusted or shared_pki().grpc_ca.cert_file))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def trust(scaler: RunningScaler) -> ssl.SSLContext:
    """As the kube-aggregator calls: its front-proxy client certificate."""
    return client(shared_pki().front_proxy)


async def get(
    scaler: RunningScaler, path: str, context: ssl.SSLContext | None = None, method: str = "GET"
) -> tuple[int, Any]:
    url = f"https://127.0.0.1:{scaler.service.api_port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, ssl=context or trust(scaler)) as response,
    ):
        return response.status, json.loads(await response.text())


async def test_discovery_names_every_metric(scaler: RunningScaler) -> None:
    code, body = await get(scaler, BASE)
    assert code == 200
    assert (body["kind"], body["groupVersion"]) == ("APIResourceList", "external.metrics.k8s.io/v1beta1")
    names = {r["name"] for r in body["resources"]}
    assert {"gpuscale-gpu_util", "gpuscale-gpu_util-total", "gpuscale-sm_active", "gpuscale-power_w"} <= names
    assert all(
        r["namespaced"] and r["verbs"] == ["get"] and r["kind"] == "ExternalMetricValueList"
        for r in body["resources"]
    )
    code, group = await get(scaler, "/apis/external.metrics.k8s.io")
    assert code == 200
    assert group["preferredVersion"] == {
        "groupVersion": "external.metrics.k8s.io/v1beta1",
        "version": "v1beta1",
    }


async def test_the_value_the_hpa_asks_for(scaler: RunningScaler, nats_client: NATS) -> None:
    await scaler.fed(
        nats_client, metrics_payload(averages={"gpu_util": 83.5, "gpu_mem_used_mib": 20480.0}, pods_fresh=2)
    )
    # metric.selector.matchLabels {workload: bert, kind: Deployment}, as client-go encodes it.
    code, body = await get(
        scaler,
        f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=kind%3DDeployment%2Cworkload%3Dbert",
    )
    assert code == 200, body
    assert (body["kind"], body["apiVersion"]) == (
        "ExternalMetricValueList",
        "external.metrics.k8s.io/v1beta1",
    )
    (item,) = body["items"]
    assert item["metricName"] == "gpuscale-gpu_util"
    assert item["metricLabels"] == {"workload": "bert", "kind": "Deployment"}
    assert item["value"] == "83500m"
    assert item["window"] == 30
    stamp = dt.datetime.strptime(item["timestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert abs(stamp.timestamp() - dt.datetime.now(dt.UTC).timestamp()) < 60
    code, body = await get(
        scaler, f"{BASE}/namespaces/default/gpuscale-gpu_mem_used_mib-total?labelSelector=workload%3Dbert"
    )
    assert body["items"][0]["value"] == "40960"
    assert (
        scaler.counter(
            "gpuscale_kedascaler_requests_total", api="external_metrics", method="get_value", outcome="ok"
        )
        == 2
    )


@pytest.mark.parametrize(
    ("path", "code", "reason", "says"),
    [
        (
            f"{BASE}/namespaces/default/gpuscale-gpu_util",
            400,
            "BadRequest",
            "a labelSelector naming the workload is required",
        ),
        (
            f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=app%3Dbert",
            400,
            "BadRequest",
            "unknown selector labels app",
        ),
        (
            f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=workload+in+(a,b)",
            400,
            "BadRequest",
            "only key=value terms",
        ),
        (
            f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=workload%3Dbert,kind%3DJob",
            400,
            "BadRequest",
            "kind must be one of",
        ),
        (
            f"{BASE}/namespaces/default/DCGM_FI_DEV_GPU_UTIL?labelSelector=workload%3Dbert",
            404,
            "NotFound",
            "unknown metric 'DCGM_FI_DEV_GPU_UTIL'",
        ),
        (
            f"{BASE}/namespaces/other/gpuscale-gpu_util?labelSelector=workload%3Dbert",
            404,
            "NotFound",
            "no gpuscale metrics for other/Deployment/bert",
        ),
        ("/apis/custom.metrics.k8s.io/v1beta1", 404, "NotFound", "could not find the requested resource"),
    ],
)
async def test_refusals_are_status_objects(
    scaler: RunningScaler, nats_client: NATS, path: str, code: int, reason: str, says: str
) -> None:
    await scaler.fed(nats_client, metrics_payload())
    got, body = await get(scaler, path)
    assert got == code
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", reason, code)
    assert says in body["message"]


async def test_stale_data_is_503_and_writes_are_405(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    async with running_scaler(api_settings(nats_server.url, max_metrics_age="1")) as scaler:
        await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 95.0}))
        path = f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=workload%3Dbert"

        async def stale() -> bool:
            code, body = await get(scaler, path)
            if code == 200:
                return False
            assert (code, body["reason"]) == (503, "ServiceUnavailable")
            assert "not served as current" in body["message"]
            return True

        await eventually(stale, what="the value to go stale")
        code, body = await get(scaler, path, method="POST")
        assert (code, body["reason"]) == (405, "MethodNotAllowed")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine")
async def test_kubectl_get_raw_reads_it_as_from_an_api_server(
    scaler: RunningScaler, nats_client: NATS, tmp_path: Path
) -> None:
    await scaler.fed(
        nats_client, metrics_payload(WorkloadKey("ml", "StatefulSet", "llm"), averages={"sm_active": 71.25})
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "s",
                        "cluster": {
                            "server": f"https://127.0.0.1:{scaler.service.api_port}",
                            "certificate-authority": str(shared_pki().grpc_ca.cert_file),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "client-certificate": str(shared_pki().front_proxy[0]),
                            "client-key": str(shared_pki().front_proxy[1]),
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={kubeconfig}", "get", "--raw",
        f"{BASE}/namespaces/ml/gpuscale-sm_active?labelSelector=workload%3Dllm%2Ckind%3DStatefulSet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    (item,) = json.loads(out)["items"]
    assert (item["metricName"], item["value"], item["metricLabels"]) == (
        "gpuscale-sm_active",
        "71250m",
        {"workload": "llm", "kind": "StatefulSet"},
    )


# --- client certificates: only the API server's front proxy gets in -----------------------------


async def test_only_the_front_proxy_gets_in(scaler: RunningScaler) -> None:
    pki = shared_pki()
    assert scaler.service.tls_cert_file == pki.server[0]
    code, body = await get(scaler, BASE, client(pki.front_proxy))
    assert (code, body["kind"]) == (200, "APIResourceList")
    # No certificate, one of an unknown CA, one of the gRPC CA (KEDA's): no handshake at all.
    for who in (None, pki.stranger, pki.keda):
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await get(
                scaler,
                f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=workload%3Dbert",
                client(who),
            )


async def test_a_front_proxy_certificate_of_another_name_is_forbidden(nats_server: EmbeddedNats) -> None:
    pki = shared_pki()
    other = pki.front_proxy_ca.issue("system:anonymous-tenant", client=True)
    settings = api_settings(nats_server.url, requestheader_allowed_names="front-proxy-client, aggregator")
    async with running_scaler(settings) as scaler:
        code, body = await get(scaler, BASE, client(pki.front_proxy))
        assert code == 200
        path = f"{BASE}/namespaces/default/gpuscale-gpu_util?labelSelector=workload%3Dbert"
        code, body = await get(scaler, path, client(other))
        assert (code, body["kind"], body["reason"]) == (403, "Status", "Forbidden")
        assert "system:anonymous-tenant" in body["message"]
        assert (
            scaler.counter(
                "gpuscale_kedascaler_requests_total",
                api="external_metrics",
                method="any",
                outcome="forbidden",
            )
            == 1
        )


async def test_a_self_signed_key_is_removed_at_stop_and_a_given_one_is_kept(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    ca = str(shared_pki().front_proxy_ca.cert_file)
    self_signed = settings_for(nats_server.url, external_metrics_api="true", client_ca_file=ca)
    async with running_scaler(self_signed) as scaler:
        made = scaler.service.tls_cert_file
        assert made is not None
        assert made.exists()
        assert (made.parent / "tls.key").exists()
        assert await scaler.stop() == 0
    assert not made.parent.exists(), "the self-signed private key outlived the service"

    key = new_key()
    given = write_pair(
        tmp_path, "server", make_cert("gpuscale-keda-scaler", key, None, ca=False, server=True), key
    )
    settings = api_settings(nats_server.url, tls_cert_file=str(given[0]), tls_private_key_file=str(given[1]))
    async with running_scaler(settings) as scaler:
        assert await scaler.stop() == 0
    assert all(path.exists() for path in given), "the operator's own certificate was removed"
