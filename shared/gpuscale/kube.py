"""kubernetes-asyncio plumbing shared by the services that talk to the API."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration


async def new_api_client(kubeconfig: Path | None) -> ApiClient:
    """An API client from ``kubeconfig``, else in-cluster config, else ~/.kube/config."""
    configuration = Configuration()
    if kubeconfig is not None:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in kubernetes-asyncio
    else:
        await config.load_kube_config(client_configuration=configuration)
    return ApiClient(configuration=configuration)
