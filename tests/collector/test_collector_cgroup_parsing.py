"""PID → pod: /proc/<pid>/cgroup for cgroup v1 and v2, systemd and cgroupfs drivers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuscale_collector.app import CgroupResolver
from gpuscale_collector.core.cgroup import CgroupIdentity, container_id_of_status, parse_cgroup

UID = "0f3a9c2e-5b1d-4e8a-9c7f-2a6b4d8e1f30"
UID_US = UID.replace("-", "_")
CID = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    expected: CgroupIdentity | None


def v1(path: str) -> str:
    """A cgroup v1 file: several hierarchies, all with the same path, plus systemd's own."""
    return "\n".join(
        [
            f"12:memory:{path}",
            f"11:cpu,cpuacct:{path}",
            f"10:devices:{path}",
            "1:name=systemd:/system.slice/containerd.service",
            "",
        ]
    )


def v2(path: str) -> str:
    return f"0::{path}\n"


SYSTEMD_BURSTABLE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/cri-containerd-{CID}.scope"
SYSTEMD_GUARANTEED = f"/kubepods.slice/kubepods-pod{UID_US}.slice/cri-containerd-{CID}.scope"
CGROUPFS_BURSTABLE = f"/kubepods/burstable/pod{UID}/{CID}"
CGROUPFS_GUARANTEED = f"/kubepods/pod{UID}/{CID}"

CASES = [
    Case("v1 systemd burstable", v1(SYSTEMD_BURSTABLE), CgroupIdentity(UID, CID)),
    Case("v1 cgroupfs burstable", v1(CGROUPFS_BURSTABLE), CgroupIdentity(UID, CID)),
    Case("v2 systemd burstable", v2(SYSTEMD_BURSTABLE), CgroupIdentity(UID, CID)),
    Case("v2 cgroupfs burstable", v2(CGROUPFS_BURSTABLE), CgroupIdentity(UID, CID)),
    Case("v2 systemd guaranteed (no qos level)", v2(SYSTEMD_GUARANTEED), CgroupIdentity(UID, CID)),
    Case("v1 cgroupfs guaranteed (no qos level)", v1(CGROUPFS_GUARANTEED), CgroupIdentity(UID, CID)),
    Case(
        "v2 systemd besteffort with docker",
        v2(
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/docker-{CID}.scope"
        ),
        CgroupIdentity(UID, CID),
    ),
    Case(
        "v2 systemd cri-o",
        v2(f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/crio-{CID}.scope"),
        CgroupIdentity(UID, CID),
    ),
    Case(
        "v2 nested under a kind node's own cgroup",
        v2(f"/system.slice/docker-ffff.scope/kubelet.slice{SYSTEMD_BURSTABLE}"),
        CgroupIdentity(UID, CID),
    ),
    Case(
        "v2 pod-level only (the pause sandbox's parent)",
        v2(f"/kubepods/burstable/pod{UID}"),
        CgroupIdentity(UID, None),
    ),
    Case("upper-case uid is normalised", v2(f"/kubepods/pod{UID.upper()}/{CID}"), CgroupIdentity(UID, CID)),
    Case("host process (v2)", v2("/system.slice/sshd.service"), None),
    Case("host process (v1)", v1("/user.slice/user-1000.slice/session-3.scope"), None),
    Case("empty file", "", None),
    Case(
        "garbage lines around a good one",
        "garbage\n::\n7:pids\n\x00\x01binary:junk:\n" + v2(CGROUPFS_BURSTABLE) + "not:a:pod/path\n",
        CgroupIdentity(UID, CID),
    ),
    Case("pod segment with a malformed uid", v2("/kubepods/burstable/podnot-a-uid/abc"), None),
    Case(
        "v1: a container line wins over a pod-only line",
        f"3:cpuset:/kubepods/burstable/pod{UID}\n2:memory:/kubepods/burstable/pod{UID}/{CID}\n",
        CgroupIdentity(UID, CID),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_parse_cgroup(case: Case) -> None:
    assert parse_cgroup(case.text) == case.expected


@pytest.mark.parametrize(
    ("status_id", "expected"),
    [
        (f"containerd://{CID}", CID),
        (f"docker://{CID}", CID),
        (f"cri-o://{CID}", CID),
        (CID.upper(), CID),
    ],
)
def test_container_id_of_status(status_id: str, expected: str) -> None:
    assert container_id_of_status(status_id) == expected


def test_resolver_reads_a_fake_proc_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, text in {
        101: v1(SYSTEMD_BURSTABLE),
        102: v2(CGROUPFS_GUARANTEED),
        103: v2("/system.slice/nvidia-persistenced.service"),
        104: "\x00\xff garbage",
    }.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    resolver = CgroupResolver(proc)
    found = resolver.resolve({101, 102, 103, 104, 999})  # 999: gone already
    assert found == {101: CgroupIdentity(UID, CID), 102: CgroupIdentity(UID, CID)}


def test_resolver_forgets_pids_that_left_the_gpu(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text(v2(CGROUPFS_BURSTABLE))
    resolver = CgroupResolver(proc)
    assert 7 in resolver.resolve({7})
    # PID 7 exits and is reused by a host process: a fresh read, not the cached pod.
    (proc / "7" / "cgroup").write_text(v2("/system.slice/cron.service"))
    assert resolver.resolve(set()) == {}
    assert resolver.resolve({7}) == {}
