"""docs/helm.md's RBAC table says exactly what the chart grants, and where (issue 43, item 15).

1. Against `helm template`, in both modes: every rule the chart renders for the operator and
   the drivers is a row of the table (group, resources, resourceNames, verbs, and whether a
   Role in each listed namespace or a ClusterRole holds it), and every row is a rule.
2. Against the API server: the rendered RBAC is applied, and SubjectAccessReviews ask, for
   every row and verb, whether the operator's ServiceAccount may do it in a watched
   namespace, in an unwatched one and in kube-system. With `watch.namespaces` it may only in
   the watched one; without, everywhere, kube-system included (what the docs now say).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client

from ..api_cases import ROOT
from .test_chart import env, run, template  # noqa: F401 - env is a fixture

pytestmark = pytest.mark.integration

DOC = ROOT / "docs/helm.md"
START, END = "<!-- rbac:start", "<!-- rbac:end -->"
# Where a row says a rule is held, per mode: the kind that holds it, or None.
HELD = {"Role, each listed namespace": "Role", "ClusterRole, every namespace": "ClusterRole",
        "ClusterRole, cluster-scoped": "ClusterRole", "none": None}


@dataclass(frozen=True)
class Row:
    who: str
    group: str
    resources: tuple[str, ...]
    names: tuple[str, ...]
    verbs: tuple[str, ...]
    namespaced: str | None  # kind holding it with watch.namespaces
    everywhere: str | None  # kind holding it without
    cell_ns: str
    cell_all: str


def _ticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def doc_rows(release: str) -> list[Row]:
    text = DOC.read_text()
    table = text[text.index(START):text.index(END)].splitlines()[1:]
    rows = []
    for line in table[2:]:
        who, group, resources, verbs, ns_cell, all_cell, _why = [c.strip() for c in line.strip("|").split("|")]
        if not verbs:
            continue  # executors and readers: no rules
        res_part, _, names_part = resources.partition("resourceNames")
        g = _ticks(group)[0]
        who = "driver" if who.startswith("driver") else "operator"
        if who == "driver":
            held = ("driver", "driver")
        else:
            held = (HELD[ns_cell], HELD[all_cell])
        rows.append(Row(who, "" if g == '""' else g, tuple(_ticks(res_part)),
                        tuple(n.replace("<release>", release) for n in _ticks(names_part)),
                        tuple(v.strip() for v in verbs.split(",")), held[0], held[1], ns_cell, all_cell))
    return rows


def _facts_of_rows(rows: list[Row], mode: str) -> set[tuple]:
    out = set()
    for r in rows:
        kind = r.namespaced if mode == "namespaced" else r.everywhere
        if kind is None:
            continue
        for res in r.resources:
            for verb in r.verbs:
                out.add((kind, r.group, res, r.names, verb))
    return out


def _facts_of_chart(docs: list[dict], release: str, watched: list[str]) -> set[tuple]:
    out = set()
    roles_by_ns = {}
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        name = d["metadata"]["name"]
        kind = "driver" if name == f"{release}-antidote-spark-driver" else d["kind"]
        assert name in (f"{release}-antidote-operator", f"{release}-antidote-spark-driver"), name
        if d["kind"] == "Role":
            roles_by_ns[d["metadata"]["namespace"]] = d["rules"]
        for rule in d["rules"]:
            (group,) = rule["apiGroups"]
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((kind, group, res, tuple(rule.get("resourceNames", ())), verb))
    # One Role in each listed namespace, all alike.
    assert sorted(roles_by_ns) == sorted(watched)
    assert len({yaml.safe_dump(r) for r in roles_by_ns.values()}) <= 1
    return out


@pytest.mark.parametrize("mode", ["namespaced", "cluster-wide"])
def test_the_rbac_table_is_what_the_chart_renders(mode: str, env) -> None:  # noqa: F811
    sets = ["replicaCount=2"] + (["watch.namespaces={a,b}"] if mode == "namespaced" else [])
    docs = template(env, *sets, release="t")
    rows = doc_rows("t")
    assert _facts_of_rows(rows, mode) == _facts_of_chart(docs, "t", ["a", "b"] if mode == "namespaced" else [])


def _allowed(authz: client.AuthorizationV1Api, user: str, ns: str | None, group: str, resource: str,
             verb: str, name: str | None) -> bool:
    res, _, sub = resource.partition("/")
    attrs = {"group": group, "resource": res, "verb": verb}
    if sub:
        attrs["subresource"] = sub
    if ns is not None:
        attrs["namespace"] = ns
    if name:
        attrs["name"] = name
    review = authz.create_subject_access_review({"spec": {"user": user, "resourceAttributes": attrs}})
    return bool(review.status.allowed)


@pytest.mark.parametrize("mode", ["namespaced", "cluster-wide"])
def test_the_api_server_grants_what_the_table_says_where_it_says(mode: str, env, api_client, core_v1,  # noqa: F811
                                                                   namespace: str) -> None:
    release = f"rb{uuid.uuid4().hex[:6]}"
    unwatched = f"{namespace[:50]}-u"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=unwatched)))
    sets = ["replicaCount=2"] + ([f"watch.namespaces={{{namespace}}}"] if mode == "namespaced" else [])
    rbac = [d for d in template(env, *sets, release=release, namespace=namespace)
            if d["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    manifest = "\n---\n".join(yaml.safe_dump(d) for d in rbac)
    run(env, "kubectl", "apply", "-f", "-", stdin=manifest)
    try:
        authz = client.AuthorizationV1Api(api_client)
        user = f"system:serviceaccount:{namespace}:{release}-antidote"
        checked = 0
        for row in doc_rows(release):
            if row.who != "operator":
                continue
            cell = row.cell_ns if mode == "namespaced" else row.cell_all
            kind = row.namespaced if mode == "namespaced" else row.everywhere
            for res in row.resources:
                for verb in row.verbs:
                    for name in row.names or (None,):
                        if cell.endswith("cluster-scoped") or (kind is None and res.startswith("cluster")):
                            assert _allowed(authz, user, None, row.group, res, verb, name) is (kind is not None), \
                                (mode, res, verb)
                            checked += 1
                            continue
                        want = {namespace: kind is not None,
                                unwatched: kind == "ClusterRole",
                                "kube-system": kind == "ClusterRole"}
                        got = {ns: _allowed(authz, user, ns, row.group, res, verb, name) for ns in want}
                        assert got == want, (mode, row.group, res, verb, cell)
                        checked += 1
        assert checked > 40
        # The headline of the docs, asked directly: a Deployment, a Job and a ServiceAccount
        # in kube-system.
        for group, res in (("apps", "deployments"), ("batch", "jobs"), ("", "serviceaccounts")):
            assert _allowed(authz, user, "kube-system", group, res, "create", None) is (mode == "cluster-wide")
    finally:
        run(env, "kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=manifest)
        core_v1.delete_namespace(unwatched)
