"""One way to build an API client: ``--kubeconfig``, else in-cluster config, else ~/.kube/config."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


class ClusterConfigError(Exception):
    """No usable cluster config: ``str()`` is one line with the cause; ``remedy`` says what to do."""

    def __init__(self, cause: str, remedy: str) -> None:
        super().__init__(f"{cause}; {remedy}")
        self.cause = cause
        self.remedy = remedy


def _kubeconfig_problem(where: str, e: BaseException) -> ClusterConfigError:
    text = " ".join(str(e).split()) or type(e).__name__
    return ClusterConfigError(
        f"cannot use the kubeconfig {where}: {text[:200]}",
        "pass a readable kubeconfig with --kubeconfig (or KUBECONFIG), as `kubectl config view` shows it",
    )


def _default_kubeconfig() -> str:
    return os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])


def _check_config_present(kubeconfig: Path | None) -> None:
    """A missing file named in words, before kubernetes-asyncio's own message."""
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise ClusterConfigError(
                f"the kubeconfig {kubeconfig} does not exist",
                "pass the path of an existing kubeconfig with --kubeconfig (or KUBECONFIG)",
            )
    elif not os.environ.get("KUBERNETES_SERVICE_HOST") and not os.path.isfile(_default_kubeconfig()):
        raise ClusterConfigError(
            "no cluster config: not in a pod and no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config)",
            "pass --kubeconfig PATH, or run it in the cluster",
        )


async def new_api_client(kubeconfig: Path | None) -> ApiClient:
    """An API client from ``kubeconfig``, else in-cluster config, else ~/.kube/config;
    :class:`ClusterConfigError` in one line when none of them is usable."""
    # Imported here: the package's other modules serve the collector, whose budget has no room for it (38 MB).
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import ApiClient, Configuration

    configuration = Configuration()
    _check_config_present(kubeconfig)
    if kubeconfig is not None:
        try:
            await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        except Exception as e:  # noqa: BLE001 - unreadable, not YAML, no context: one line for the operator
            raise _kubeconfig_problem(str(kubeconfig), e) from None
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in kubernetes-asyncio
        except Exception as e:  # noqa: BLE001 - a pod without its service account token
            raise ClusterConfigError(
                f"in a pod, but its service account cannot be read ({' '.join(str(e).split())})",
                "give the pod a service account with automountServiceAccountToken: true",
            ) from None
    else:
        try:
            await config.load_kube_config(client_configuration=configuration)
        except Exception as e:  # noqa: BLE001 - e.g. "Expected key current-context": one line
            raise _kubeconfig_problem(_default_kubeconfig(), e) from None
    return ApiClient(configuration=configuration)
