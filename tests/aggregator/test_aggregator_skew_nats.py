"""Rolling upgrades: the aggregator reads batches from collectors one version
newer and one older, through its real subscription on a real nats-server.

A newer collector adds fields at every level; an older one leaves every optional field out. The
aggregator averages what it knows either way, counts each unknown name once
in /metrics and rejects nothing. The scale-out stage's sub-batches
(gpuscale.v1.aggregator.*) cross versions the same way.
"""

from __future__ import annotations

import time

import pytest

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import SampleBatch

from ..skew import counted, golden, newer, newer_names, older, pack, restamp
from ..waiting import eventually
from .aggregator_harness import MetricsInbox, counter, running_aggregator

pytestmark = pytest.mark.integration

NODE = "gpu-node-1.example"  # the golden batch's node (a dot: an escaped subject token)
BERT_POD = "bert-7d9f8c6b5-abcde"  # on GPUs 0 and 1 of the golden batch (23 % and 64 %)
MIG_POD = "bert-7d9f8c6b5-fghij"  # on the MIG device (88 %), not ready yet


def _batches(variant: str, count: int = 3) -> list[bytes]:
    """The golden batch as a collector of ``variant`` sends it, ``count`` ticks ending now."""
    base = golden("samples")
    if variant == "newer":
        base = newer(base, SampleBatch)
    elif variant == "older":
        base = older(base, SampleBatch)
    now = time.time()
    return [pack({**restamp(base, now - (count - 1 - k)), "seq": k}) for k in range(count)]


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_batches_from_another_collector_version_are_averaged(
    nats_server: EmbeddedNats, nats_client: NATS, variant: str
) -> None:
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        for data in _batches(variant):
            await nats_client.publish(subjects.samples(NODE), data)
        await natsio.flush(nats_client)
        await eventually(
            lambda: counter(service, "gpuscale_aggregator_gpu_samples_total") == 15, what="samples in"
        )
        # An older collector does not say whether a pod is ready: the pod loading
        # its model on the MIG device (88 %) counts as fresh, as before `ready` existed.
        pods = [BERT_POD] if variant == "newer" else [BERT_POD, MIG_POD]
        await eventually(
            lambda: (m := inbox.latest("bert")) is not None and m.pods_fresh == len(pods),
            what="bert's metrics",
        )
        bert, llama = inbox.latest("bert"), inbox.latest("llama")
        assert bert is not None
        assert llama is not None
        assert [p.pod for p in bert.pods] == pods
        bert_util = [(23.0 + 64.0) / 2] if variant == "newer" else [(23.0 + 64.0) / 2, 88.0]
        assert bert.averages["gpu_util"] == pytest.approx(sum(bert_util) / len(bert_util))
        assert llama.averages["gpu_util"] == pytest.approx(64.0)
        if variant == "newer":
            assert llama.averages["sm_util"] == pytest.approx(47.0)
        else:
            # An older collector did not attribute per process: no sm_util, and
            # memory falls back to the GPU's.
            assert "sm_util" not in llama.averages
            assert llama.averages["gpu_mem_used_mib"] == pytest.approx(61_440.0)
        assert counted(service, "gpuscale_messages_rejected") == {}
        assert counter(service, "gpuscale_aggregator_gpu_samples_rejected_total", reason="missing_field") == 0
        unknown = counted(service, "gpuscale_messages_unknown_fields")
        expected = newer_names(golden("samples"), SampleBatch) if variant == "newer" else set()
        assert unknown == dict.fromkeys(expected, 1.0)  # each name once, however many batches


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_sub_batches_from_another_aggregator_version_are_owned(
    nats_server: EmbeddedNats, nats_client: NATS, variant: str
) -> None:
    """The split stage of one version feeds the owning stage of another."""
    base = golden("aggregator-wsamples")
    base = newer(base, SampleBatch) if variant == "newer" else older(base, SampleBatch)
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url, partition=(0, 1)) as service:
        await eventually(lambda: service.replay_done, what="replay")
        subject = f"{subjects.AGGREGATOR_PARTS_PREFIX}.0.default.Deployment.bert"
        await nats_client.publish(subject, pack(restamp(base, time.time())))
        await natsio.flush(nats_client)
        await eventually(lambda: inbox.latest("bert") is not None, what="bert's metrics")
        bert = inbox.latest("bert")
        assert bert is not None
        expected = [(23.0 + 64.0) / 2] if variant == "newer" else [(23.0 + 64.0) / 2, 88.0]
        assert bert.averages["gpu_util"] == pytest.approx(sum(expected) / len(expected))
        assert counter(service, "gpuscale_aggregator_gpu_samples_total") == 3
