"""Playing the cluster, one module per role, through the API server's store.

- :mod:`.controllers`: Deployments own ReplicaSets that own pods; StatefulSets
  own ordinal pods; workload status follows;
- :mod:`.scheduler`: pods go to nodes with free GPUs;
- :mod:`.kubelet`: pods load their model, run Ready, terminate; pod status;
- :mod:`.loadmodel`: each workload's GPU load, read out per node as the
  simulated-GPU feed, from the profiles of :mod:`.load`;
- :mod:`.inference`: inference-server pods whose requests queue;
- :mod:`.podnet`: pod IPs on loopback, with the inference pods' ``/metrics``;
- :mod:`.scenarios`: the built-in clusters and scenario files;
- :mod:`.player`: runs them after every write, with one clock reading per pass.
"""

from .common import GPU_RESOURCE, LOAD_ANNOTATION, Now, PodState
from .player import ClusterPlayer

__all__ = ["GPU_RESOURCE", "LOAD_ANNOTATION", "ClusterPlayer", "Now", "PodState"]
