"""kube-sim: a Kubernetes API simulator that also plays a GPU cluster."""

from gpuscale_kubesim.sim import KubeSim

__all__ = ["KubeSim"]
