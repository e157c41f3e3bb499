"""The simulated-GPU feed contract: kube-sim serves it, the collector parses it."""

from __future__ import annotations

import aiohttp
import pytest

from gpuscale.simfeed import FeedError, FeedGpu, FeedOwner, FeedWorkload, NodeGpus, node_gpus_path
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload


def test_round_trip() -> None:
    feed = NodeGpus(
        "gpu-node-1",
        1_700_000_000.5,
        (
            FeedGpu(
                0,
                "GPU-a",
                "NVIDIA H100 80GB HBM3",
                87.5,
                mem_util=52.0,
                fb_used_mib=40000.0,
                owners=(
                    FeedOwner("default", "bert-1", "server", "u1", FeedWorkload("Deployment", "bert"), True),
                ),
            ),
            FeedGpu(1, "GPU-b", "NVIDIA H100 80GB HBM3", 0.0),
        ),
    )
    assert NodeGpus.from_json(feed.to_json()) == feed


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ([], "expected an object with a gpus list"),
        ({"gpus": [{"index": 0, "util": float("nan")}]}, "gpus[0].util must be a number"),
        ({"gpus": [{"index": True}]}, "gpus[0].index must be a whole number >= 0"),
        ({"gpus": [{"index": 0, "uuid": 7}]}, "gpus[0].uuid must be a non-empty string"),
        (
            {"gpus": [{"index": 0, "owners": [{"namespace": "d"}]}]},
            "gpus[0].owners[0] needs namespace and pod",
        ),
        ({"gpus": [{"index": 0, "owners": [{"namespace": "d", "pod": "p", "ready": "yes"}]}]}, "ready"),
    ],
)
def test_bad_payloads_name_the_problem(payload: object, problem: str) -> None:
    with pytest.raises(FeedError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        NodeGpus.from_json(payload)


@pytest.mark.integration
async def test_kube_sim_serves_the_contract(kube_sim: KubeSim) -> None:
    await kube_sim.create(gpu_workload("bert", node="gpu-node-1"))
    kube_sim.set_load("default", "bert", 60)
    async with (
        aiohttp.ClientSession() as session,
        session.get(kube_sim.url + node_gpus_path("gpu-node-1")) as response,
    ):
        assert response.status == 200
        feed = NodeGpus.from_json(await response.json())
    assert feed.node == "gpu-node-1"
    assert [g.index for g in feed.gpus] == list(range(8))
    held = [g for g in feed.gpus if g.owners]
    assert len(held) == 1
    assert held[0].owners[0].workload == FeedWorkload("Deployment", "bert")
