"""An object of a child's name that is not the consumer's own (issue 43, item 11): the pure
rule (ownership), `kube.apply` writing nothing of it, the children after it not applied, and
Ready=False ChildConflict with one Warning Event (decide)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from antidote_api.conditions import ReadyReason
from antidote_operator import kube, ownership
from antidote_operator.builders import driver
from antidote_operator.builders.common import RenderOptions
from antidote_operator.metrics import OperatorMetrics
from antidote_operator.observations import DeploymentView
from antidote_operator.reconcile import _apply_children, on_deployment
from antidote_operator.state import Registry
from antidote_operator.status import CONFLICT_RECHECK, decide

from .test_operator_status import T0, cond, inputs

QC = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
      "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web"}}


def ref(uid: str, kind: str = "QueueConsumer", name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "antidote.dev/v1alpha1", "kind": kind, "name": name, "uid": uid}


class Server:
    """Objects by (plural, name), each with a uid; records every request."""

    def __init__(self, *objects: tuple[str, dict[str, Any]]):
        self.objects = {(plural, o["metadata"]["name"]): o for plural, o in objects}
        self.requests: list[str] = []
        self.uids = 0

    async def get(self, kind: kube.Kind, ns: str, name: str) -> dict[str, Any] | None:
        self.requests.append(f"GET {kind.plural}/{name}")
        obj = self.objects.get((kind.plural, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def create(self, kind: kube.Kind, ns: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append(f"POST {kind.plural}/{body['metadata']['name']}")
        if (kind.plural, body["metadata"]["name"]) in self.objects:
            raise kube.Conflict("already exists")
        self.uids += 1
        stored = copy.deepcopy(dict(body))
        stored["metadata"]["uid"] = f"created-{self.uids}"
        self.objects[(kind.plural, body["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    async def patch(self, kind: kube.Kind, ns: str, name: str, patch: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        self.requests.append(f"PATCH {kind.plural}/{name} uid={patch.get('metadata', {}).get('uid')}")
        return {}

    async def delete(self, kind: kube.Kind, ns: str, name: str, **kw: Any) -> bool:
        self.requests.append(f"DELETE {kind.plural}/{name} uid={kw.get('uid')}")
        return self.objects.pop((kind.plural, name), None) is not None


def writes(server: Server) -> list[str]:
    return [r for r in server.requests if not r.startswith("GET")]


def foreign(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "shop", "uid": "theirs",
                                                          "labels": {"team": "web"}}, **extra}


def children(replicas: int = 1) -> list[dict[str, Any]]:
    settings = decide(inputs(name="web")).settings
    assert settings is not None
    return driver.build_children(QC, settings, replicas=replicas, opts=RenderOptions())


def child(kind: str) -> dict[str, Any]:
    return next(c for c in children() if c["kind"] == kind)


# --- the rule ----------------------------------------------------------------------------

def test_owned_means_an_owner_reference_to_that_very_uid() -> None:
    mine = {"metadata": {"ownerReferences": [ref("uid-web")]}}
    assert ownership.owned_by(mine, "uid-web")
    # The same name's consumer deleted and created again is another owner.
    assert not ownership.owned_by(mine, "uid-web-2")
    assert not ownership.owned_by({"metadata": {}}, "uid-web")
    assert not ownership.owned_by(mine, None)
    assert ownership.owned_by_a_consumer(mine)
    assert not ownership.owned_by_a_consumer({"metadata": {"ownerReferences": [ref("x", kind="ReplicaSet")]}})
    assert not ownership.owned_by_a_consumer({"metadata": {}})


def test_the_conflict_names_the_object_and_its_would_be_owner() -> None:
    dep = child("Deployment")
    assert ownership.conflict_of(dep, None) is None
    assert ownership.conflict_of(dep, {"metadata": {"ownerReferences": [ref("uid-web")]}}) is None
    message = ownership.conflict_of(dep, foreign("Deployment", "web"))
    assert message is not None
    assert message.startswith("Deployment web exists and is not owned by QueueConsumer web")


def test_a_child_without_an_owner_cannot_be_checked_and_is_refused() -> None:
    with pytest.raises(ValueError, match="no owner"):
        ownership.conflict_of({"kind": "ConfigMap", "metadata": {"name": "x"}}, None)


# --- kube.apply writes nothing of another's object ------------------------------------------

@pytest.mark.parametrize("create_first", [False, True])
def test_apply_leaves_another_deployment_of_the_childs_name_unwritten(create_first: bool) -> None:
    server = Server(("deployments", foreign("Deployment", "web", spec={"replicas": 3})))
    before = copy.deepcopy(server.objects)
    with pytest.raises(kube.NotOwned, match="Deployment web exists and is not owned by QueueConsumer web"):
        asyncio.run(kube.apply(server, child("Deployment"), create_first=create_first))  # type: ignore[arg-type]
    assert [r for r in writes(server) if not r.startswith("POST")] == []  # a create is refused (409)
    assert server.objects == before


def test_apply_from_a_list_that_missed_it_reads_it_and_refuses() -> None:
    # The restart's labelled LIST does not show another's object (no labels of the consumer).
    server = Server(("serviceaccounts", foreign("ServiceAccount", "web-driver")))
    with pytest.raises(kube.NotOwned, match="ServiceAccount web-driver"):
        asyncio.run(kube.apply(server, child("ServiceAccount"), listed={}))  # type: ignore[arg-type]
    assert server.requests == ["POST serviceaccounts/web-driver", "GET serviceaccounts/web-driver"]


def test_another_rolebinding_of_another_role_is_not_deleted_and_recreated() -> None:
    theirs = foreign("RoleBinding", "web-driver", roleRef={"apiGroup": "rbac.authorization.k8s.io",
                                                           "kind": "ClusterRole", "name": "admin"},
                     subjects=[{"kind": "ServiceAccount", "name": "ci"}])
    server = Server(("rolebindings", theirs))
    with pytest.raises(kube.NotOwned):
        asyncio.run(kube.apply(server, child("RoleBinding")))  # type: ignore[arg-type]
    assert writes(server) == [] and server.objects[("rolebindings", "web-driver")] == theirs


def test_the_consumers_own_child_is_patched_on_the_condition_of_its_uid() -> None:
    mine = copy.deepcopy(child("ConfigMap"))
    mine["metadata"]["uid"] = "cm-uid"
    mine["data"] = {"settings.yaml": "drifted"}
    server = Server(("configmaps", mine))
    assert asyncio.run(kube.apply(server, child("ConfigMap"))) == "updated"  # type: ignore[arg-type]
    assert writes(server) == ["PATCH configmaps/web-settings uid=cm-uid"]


# --- the children after a conflict are not applied ---------------------------------------------

def ctx_of(server: Server) -> Any:
    return SimpleNamespace(kube=server, metrics=OperatorMetrics(Registry()))


def test_a_foreign_driver_service_account_stops_the_deployment_from_being_made() -> None:
    server = Server(("serviceaccounts", foreign("ServiceAccount", "web-driver")))
    conflict = asyncio.run(_apply_children(ctx_of(server), children(), fresh=True, listed=None))
    assert conflict is not None and conflict.startswith("ServiceAccount web-driver exists and is not owned")
    # The ConfigMap (harmless) before it; nothing after it: not the Deployment above all.
    assert writes(server) == ["POST configmaps/web-settings", "POST serviceaccounts/web-driver"]
    assert ("deployments", "web") not in server.objects


def test_with_no_conflict_every_child_is_made_the_deployment_last() -> None:
    server = Server()
    assert asyncio.run(_apply_children(ctx_of(server), children(), fresh=True, listed=None)) is None
    assert writes(server)[-1] == "POST deployments/web" and len(writes(server)) == 6


# --- the status: Ready=False ChildConflict, one Warning Event, looked at again -------------------

def test_a_conflict_makes_ready_false_with_one_warning_event_and_a_recheck() -> None:
    message = ownership.conflict_of(child("Deployment"), foreign("Deployment", "web"))
    d = decide(inputs(name="web", conflict=message))
    assert cond(d, "Ready") == ("False", ReadyReason.CHILD_CONFLICT)
    assert [(e.type, e.reason, e.message) for e in d.events] == [("Warning", "ChildConflict", message)]
    assert d.recheck_at == T0 + CONFLICT_RECHECK
    # The settings stay: each pass applies the children again, which is how it sees the end.
    assert d.settings is not None
    again = decide(inputs(name="web", conflict=message, status=d.status, now=T0 + timedelta(seconds=10)))
    assert again.events == []  # stored already: no second Event
    gone = decide(inputs(name="web", status=again.status, now=T0 + timedelta(seconds=20)))
    assert cond(gone, "Ready") == ("False", "Starting") and gone.events == []


def test_a_broken_spec_is_reported_before_a_conflict() -> None:
    d = decide(inputs(name="web", policy=None, conflict="Deployment web exists and is not owned by QueueConsumer web"))
    assert cond(d, "Ready") == ("False", "PolicyNotFound")


# --- the Deployment watch: another's Deployment of the consumer's name is not the driver --------

def test_another_deployment_with_the_consumers_label_is_neither_run_nor_counted() -> None:
    observed: list[str] = []
    registry = Registry()
    st = registry.get("shop", "web")
    st.uid = "uid-web"
    ctx = SimpleNamespace(registry=registry, runner=SimpleNamespace(observe=lambda b, d: observed.append("run"),
                                                                  metrics_url=lambda a: None,
                                                                  termination=lambda a: None),
                          syncer=SimpleNamespace(kick=lambda *a, **k: observed.append("kick")))
    theirs = foreign("Deployment", "web", spec={"replicas": 1}, status={"availableReplicas": 1})
    theirs["metadata"]["labels"]["antidote.dev/consumer"] = "web"
    on_deployment(ctx, theirs, False)
    assert observed == [] and st.deployment is None
    mine = copy.deepcopy(theirs)
    mine["metadata"]["ownerReferences"] = [ref("uid-web")]
    on_deployment(ctx, mine, False)
    assert observed == ["run", "kick"] and st.deployment == DeploymentView(replicas=1, available=1, uid="theirs")


# --- reader Jobs: not under another's ServiceAccount, another's Job not adopted ---------------

def reader_ctx(server: Server) -> Any:
    from antidote_operator.builders.reader_job import JobOptions
    from antidote_operator.state import JobIndex

    return SimpleNamespace(kube=server, metrics=OperatorMetrics(Registry()), reader_index=JobIndex(),
                           options=SimpleNamespace(render=RenderOptions(), reader_jobs=JobOptions()))


def spawn_job(server: Server) -> Any:
    from antidote_operator import reader_control
    from antidote_operator.reader_jobs import Spawn

    settings = decide(inputs(name="web")).settings
    ctx = reader_ctx(server)
    out = asyncio.run(reader_control._create_job(ctx, QC, settings, Spawn("web-reader-depth-1234abcd", "depth"), 5))
    return out, ctx


def test_a_reader_job_is_not_started_under_another_service_account() -> None:
    server = Server(("serviceaccounts", foreign("ServiceAccount", "web-reader")))
    out, _ = spawn_job(server)
    assert isinstance(out, str) and out.startswith("ServiceAccount web-reader exists and is not owned")
    assert writes(server) == []  # no Job, nothing of the ServiceAccount


def test_another_job_of_the_reader_jobs_name_is_not_adopted() -> None:
    theirs = foreign("Job", "web-reader-depth-1234abcd")
    # Labelled like one of the consumer's, which is no proof either.
    theirs["metadata"]["labels"].update({"antidote.dev/consumer": "web", "antidote.dev/reader-trigger": "depth"})
    server = Server(("jobs", theirs))
    out, ctx = spawn_job(server)
    assert isinstance(out, str) and out.startswith("Job web-reader-depth-1234abcd exists and is not owned")
    assert ctx.reader_index.of("shop", "web") == []
    assert writes(server) == ["POST serviceaccounts/web-reader", "POST jobs/web-reader-depth-1234abcd"]
