"""Playing the cluster, one module per role.

- :mod:`.controllers`: Deployments own ReplicaSets that own pods; StatefulSets
  own ordinal pods; workload status follows;
- :mod:`.scheduler`: pods go to nodes with free GPUs;
- :mod:`.kubelet`: pods load their model, run Ready, terminate; pod status;
- :mod:`.loadmodel`: each workload's GPU load, read out per node as the
  simulated-GPU feed;
- :mod:`.player`: runs them after every write, with one clock reading per pass.
"""

from .common import GPU_RESOURCE, LOAD_ANNOTATION, Now, PodState
from .player import ClusterPlayer

__all__ = ["GPU_RESOURCE", "LOAD_ANNOTATION", "ClusterPlayer", "Now", "PodState"]
