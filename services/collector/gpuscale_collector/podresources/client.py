"""A client of the kubelet's ``v1.PodResourcesLister/List`` on its unix socket.

grpc is imported on first use: the simulated backend never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscale_collector.core.devices import DeviceAssignment


class PodResourcesUnavailable(RuntimeError):
    """The socket is missing or the kubelet did not answer."""


class PodResourcesClient:
    def __init__(self, socket_path: Path, timeout_s: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: Any = None
        self._stub: Any = None

    def _connect(self) -> Any:
        import grpc  # lazy import: lazy: only the nvml backend talks to the kubelet

        from gpuscale_collector.podresources import api_pb2_grpc  # lazy import: pulls in grpc

        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path}")
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]  # generated code is untyped
        return self._stub

    async def list(self) -> list[DeviceAssignment]:
        """Every (container, resource) with its device ids, as the kubelet lists them."""
        if not self.socket_path.exists():
            await self.close()  # a kubelet restart recreates the socket: reconnect afresh
            raise PodResourcesUnavailable(f"no socket at {self.socket_path}")
        import grpc  # lazy import: see _connect

        from gpuscale_collector.podresources import api_pb2  # lazy import: see _connect

        stub = self._connect()
        try:
            response = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as e:
            await self.close()
            raise PodResourcesUnavailable(f"List failed: {e.code().name}: {e.details()}") from None
        return assignments_of(response)

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()


def assignments_of(response: Any) -> list[DeviceAssignment]:
    out: list[DeviceAssignment] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                out.append(
                    DeviceAssignment(
                        namespace=pod.namespace,
                        pod=pod.name,
                        container=container.name,
                        resource_name=devices.resource_name,
                        device_ids=tuple(devices.device_ids),
                    )
                )
    return out
