"""`gpuscale shadow-report --kubeconfig` reads each workload's HPA Events, which anyone who
may create Events in that namespace writes: as many as it likes, each core/v1 Event's
`message` as long as the API server's object limit lets it (~1.5 MiB in etcd; core/v1
Events have no note limit of their own). The report runs once for every team: read in one
answer, one team's Events cost the whole command memory in proportion to all of them (a
non-BMP character in an otherwise ASCII message makes Python hold each message at 4 bytes
a character, twice: the answer's text and the parsed message), so a team could have the
platform team's report killed for memory, every team's report with it (under a 512 MiB
limit: "MemoryError", exit 1, no report at all). Read in pages, the
command holds one page at a time."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from .test_shadow_report_hostile_events import in_namespace, two_teams
from .test_shadow_report_nats_sim import rescale_event
from .test_shadow_report_stream import BERT, LLAMA, advice, store

pytestmark = pytest.mark.integration

FLOOD = 128  # team-b's Events
MESSAGE_BYTES = 1 << 20  # each Event's message, under etcd's 1.5 MiB object limit
# The CLI's peak RSS, run as the platform team would: ~85 MiB with no flood. The flood is
# 128 MiB on the wire: ~860 MiB held at once read in one answer, ~210 MiB a page at a time.
PEAK_BOUND_KIB = 400 * 1024
# The platform team runs the report under a memory limit: past it, every team's report is lost.
DATA_LIMIT_MIB = 512

# Runs the real CLI and says its peak RSS (KiB) on stderr's last line: VmHWM is this
# program's own (ru_maxrss keeps the forking test process's across exec).
_WRAPPER = """
import os, re, resource, runpy, sys
cap = int(os.environ["DATA_LIMIT_MIB"]) << 20  # as a 512Mi limit on the platform team's job
resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
sys.argv = ["gpuscale"] + sys.argv[1:]
try:
    runpy.run_module("gpuscale_cli.main", run_name="__main__")
finally:
    with open("/proc/self/status") as f:
        peak = re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1)
    print(f"\\nmaxrss_kib={peak}", file=sys.stderr)
"""


def _fat(event: dict[str, Any], i: int) -> dict[str, Any]:
    event["metadata"]["name"] = f"llama.flood-{i:05d}"
    # ASCII but for one character past U+FFFF: Python keeps the whole string at 4 bytes a character
    event["message"] = "New size: 2; reason: " + "x" * (MESSAGE_BYTES - 30) + "\U0001f600"
    return event


async def test_a_teams_large_events_cost_the_report_one_page_not_all_of_them(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    now = time.time()
    await two_teams(kube_sim, now)
    for i in range(FLOOD):
        base = in_namespace(rescale_event("llama", 2, now - 200 + i * 0.001), "team-b", "")
        await kube_sim.create(_fat(base, i))
    await store(
        nats_client,
        [
            (subjects.advice(BERT), codec.encode(advice(BERT, now - 300, 1, 2))),
            (subjects.advice(LLAMA), codec.encode(advice(LLAMA, now - 300, 1, 2))),
        ],
    )
    args = ["--nats-url", nats_server.url, "--kubeconfig", str(kube_sim.kubeconfig_path), "--output", "json"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRAPPER, "shadow-report", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DATA_LIMIT_MIB": str(DATA_LIMIT_MIB)},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    text = err.decode()
    peak_kib = int(text.rsplit("maxrss_kib=", 1)[1].split()[0])
    assert proc.returncode == 0, text
    reports = {r["workload"]["namespace"]: r for r in json.loads(out)}
    assert [c["to_replicas"] for c in reports["team-a"]["live"]] == [2, 1]  # its Event, then /scale
    assert reports["team-b"]["live"][0]["to_replicas"] == 2  # the flood is read, all of it
    assert peak_kib < PEAK_BOUND_KIB, (
        f"shadow-report peaked at {peak_kib / 1024:.0f} MiB for team-b's {FLOOD} Events of "
        f"{MESSAGE_BYTES >> 20} MiB (bound {PEAK_BOUND_KIB >> 10} MiB)"
    )
