from gpuscale.wire import SampleBatch, WorkloadMetrics

from .pods import PodWindows, WorkloadTuple
from .window import WindowStore

CONTRACT: int

def add_batch(windows: PodWindows, batch: SampleBatch, ts: float) -> None: ...
def message(
    windows: WindowStore,
    workload: WorkloadTuple,
    members: dict[str, int],
    now: float,
    cutoff: float,
    after: float | None,
    since: float | None,
    window_s: float,
    recent_s: float | None,
    wall_offset_s: float,
) -> WorkloadMetrics | None: ...
