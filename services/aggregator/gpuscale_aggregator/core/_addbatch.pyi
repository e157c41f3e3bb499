from gpuscale.wire import SampleBatch

from .pods import PodWindows

def add_batch(windows: PodWindows, batch: SampleBatch, ts: float) -> None: ...
