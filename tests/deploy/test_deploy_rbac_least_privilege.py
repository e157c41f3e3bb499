"""RBAC: each ServiceAccount holds exactly what its service needs (docs/ARCHITECTURE.md#security).

The rules are evaluated the way the API server does (group, resource or
subresource, verb, with ``*`` wildcards), over the rendered install.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .deploy_support import DEPLOY, Obj, find, of_kind, render

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class Grant:
    """What one ServiceAccount may do, from every binding that names it."""

    account: str
    rules: tuple[tuple[str, dict[str, list[str]]], ...]  # (namespace or "*" for cluster-wide, rule)

    def allows(self, verb: str, group: str, resource: str, namespace: str = "default") -> bool:
        for scope, rule in self.rules:
            if scope not in ("*", namespace):
                continue
            if not _matches(rule.get("apiGroups", []), group):
                continue
            if not _matches(rule.get("resources", []), resource):
                continue
            if _matches(rule.get("verbs", []), verb):
                return True
        return False


def _matches(allowed: list[str], value: str) -> bool:
    return "*" in allowed or value in allowed


def _grant(objects: list[Obj], account: str) -> Grant:
    rules: list[tuple[str, dict[str, list[str]]]] = []
    for binding in of_kind(objects, "RoleBinding", "ClusterRoleBinding"):
        names_account = any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace") == "gpuscale"
            for s in binding.get("subjects", [])
        )
        if not names_account:
            continue
        ref = binding["roleRef"]
        role = find(objects, ref["kind"], ref["name"])
        scope = binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else "*"
        rules.extend((scope, rule) for rule in role["rules"])
    return Grant(account, tuple(rules))


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(DEPLOY)


ACCOUNTS = ("gpuscale-collector", "gpuscale-aggregator", "gpuscale-decider", "gpuscale-actuator")


def test_each_workload_runs_under_its_own_service_account(objects: list[Obj]) -> None:
    accounts = {sa["metadata"]["name"] for sa in of_kind(objects, "ServiceAccount")}
    assert set(ACCOUNTS) <= accounts
    for name, kind in [
        ("gpuscale-collector", "DaemonSet"),
        ("gpuscale-aggregator", "Deployment"),
        ("gpuscale-decider", "Deployment"),
        ("gpuscale-actuator", "Deployment"),
    ]:
        assert find(objects, kind, name)["spec"]["template"]["spec"]["serviceAccountName"] == name


def test_no_rule_uses_wildcards(objects: list[Obj]) -> None:
    for role in of_kind(objects, "Role", "ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {field} *"


def test_every_binding_points_at_an_existing_role_and_account(objects: list[Obj]) -> None:
    accounts = {sa["metadata"]["name"] for sa in of_kind(objects, "ServiceAccount")}
    for binding in of_kind(objects, "RoleBinding", "ClusterRoleBinding"):
        find(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert subject["name"] in accounts
            assert subject["namespace"] == "gpuscale"


def test_only_the_actuator_may_change_a_scale_subresource(objects: list[Obj]) -> None:
    for account in ACCOUNTS:
        grant = _grant(objects, account)
        for resource in ("deployments/scale", "statefulsets/scale"):
            for verb in ("patch", "update"):
                allowed = grant.allows(verb, "apps", resource)
                assert allowed == (account == "gpuscale-actuator"), (account, verb, resource)
    # Nor may anyone reach replicas through the workload object itself.
    for account in ACCOUNTS:
        grant = _grant(objects, account)
        for resource in ("deployments", "statefulsets", "replicasets"):
            for verb in WRITE_VERBS:
                assert not grant.allows(verb, "apps", resource), (account, verb, resource)


def test_the_actuator_reads_a_target_s_scale_never_the_object(objects: list[Obj]) -> None:
    grant = _grant(objects, "gpuscale-actuator")
    assert grant.allows("get", "apps", "deployments/scale")
    for resource in ("deployments", "statefulsets"):
        assert not grant.allows("get", "apps", resource), resource


def test_the_collector_can_read_pods_and_replicasets_and_write_nothing(objects: list[Obj]) -> None:
    grant = _grant(objects, "gpuscale-collector")
    for verb in ("get", "list", "watch"):
        assert grant.allows(verb, "", "pods")
    assert grant.allows("get", "apps", "replicasets")
    for _, rule in grant.rules:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    assert not grant.allows("get", "", "secrets")


def test_the_aggregator_has_no_api_access_at_all(objects: list[Obj]) -> None:
    assert _grant(objects, "gpuscale-aggregator").rules == ()
    account = find(objects, "ServiceAccount", "gpuscale-aggregator")
    pod = find(objects, "Deployment", "gpuscale-aggregator")["spec"]["template"]["spec"]
    assert (
        account.get("automountServiceAccountToken") is False or pod["automountServiceAccountToken"] is False
    )


DECIDER_NEEDS = [
    ("get", "gpuscale.io", "gpuscalers"),
    ("list", "gpuscale.io", "gpuscalers"),
    ("watch", "gpuscale.io", "gpuscalers"),
    ("update", "gpuscale.io", "gpuscalers/status"),
    ("patch", "gpuscale.io", "gpuscalers/status"),
    ("get", "apps", "deployments/scale"),
    ("get", "apps", "statefulsets/scale"),
    ("list", "apps", "deployments"),
    ("list", "apps", "statefulsets"),
    ("list", "autoscaling", "horizontalpodautoscalers"),
    ("list", "keda.sh", "scaledobjects"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("create", "events.k8s.io", "events"),  # Events on the GPUScalers, in their namespaces
]

ACTUATOR_NEEDS = [
    ("get", "apps", "deployments/scale"),
    ("patch", "apps", "deployments/scale"),
    ("update", "apps", "statefulsets/scale"),
    ("patch", "apps", "statefulsets/scale"),
    ("get", "apps", "statefulsets/scale"),
    ("create", "", "events"),
    ("patch", "", "events"),
    ("create", "events.k8s.io", "events"),
    ("list", "gpuscale.io", "gpuscalers"),
    ("watch", "gpuscale.io", "gpuscalers"),
]


@pytest.mark.parametrize(
    ("account", "needs"),
    [("gpuscale-decider", DECIDER_NEEDS), ("gpuscale-actuator", ACTUATOR_NEEDS)],
)
def test_the_controllers_can_do_their_job(
    objects: list[Obj], account: str, needs: list[tuple[str, str, str]]
) -> None:
    grant = _grant(objects, account)
    missing = [n for n in needs if not grant.allows(n[0], n[1], n[2], namespace="inference")]
    assert missing == []


def test_the_decider_writes_only_gpuscaler_status_and_its_lease(objects: list[Obj]) -> None:
    grant = _grant(objects, "gpuscale-decider")
    writes = {
        (scope, group, resource)
        for scope, rule in grant.rules
        if set(rule["verbs"]) & set(WRITE_VERBS)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert writes == {
        ("*", "gpuscale.io", "gpuscalers/status"),
        ("*", "events.k8s.io", "events"),
        ("gpuscale", "coordination.k8s.io", "leases"),
    }
    assert not grant.allows("update", "gpuscale.io", "gpuscalers")


def test_the_decider_may_only_create_events_never_read_change_or_delete_them(objects: list[Obj]) -> None:
    grant = _grant(objects, "gpuscale-decider")
    assert grant.allows("create", "events.k8s.io", "events", namespace="inference")
    for verb in ("get", "list", "watch", "update", "patch", "delete", "deletecollection"):
        assert not grant.allows(verb, "events.k8s.io", "events"), verb
    for verb in ("create", *WRITE_VERBS):
        assert not grant.allows(verb, "", "events"), f"core v1 events: {verb}"


def test_the_decider_lists_and_watches_pods_and_nothing_more_of_them(objects: list[Obj]) -> None:
    grant = _grant(objects, "gpuscale-decider")
    for verb in ("get", *WRITE_VERBS):
        assert not grant.allows(verb, "", "pods"), verb
    assert not grant.allows("get", "", "pods/log")
    assert not grant.allows("create", "", "pods/exec")


@pytest.mark.parametrize("account", ["gpuscale-decider", "gpuscale-actuator"])
def test_leader_election_leases_only_in_the_gpuscale_namespace(objects: list[Obj], account: str) -> None:
    grant = _grant(objects, account)
    for verb in ("get", "create", "update"):
        assert grant.allows(verb, "coordination.k8s.io", "leases", namespace="gpuscale")
        assert not grant.allows(verb, "coordination.k8s.io", "leases", namespace="default")
    assert not grant.allows("delete", "coordination.k8s.io", "leases", namespace="gpuscale")
