"""The dev runner's kubelet part for a container's environment (dev/antidote_devrunner/env.py): env and
envFrom resolved from Secrets and ConfigMaps, the pod's own order, optional refs, and a
missing one refused naming the variable and the object."""

from __future__ import annotations

import asyncio
import base64

import pytest

from antidote_operator import kube
from antidote_devrunner import env as env_of


class FakeKube:
    """The two reads `resolve` makes (GET a Secret, GET a ConfigMap), from a dict."""

    def __init__(self, objects: dict[tuple[str, str], dict]):
        self.objects = objects
        self.gets: list[tuple[str, str]] = []

    async def get(self, kind: kube.Kind, namespace: str, name: str):
        what = "Secret" if kind.plural == "secrets" else "ConfigMap"
        self.gets.append((what, name))
        return self.objects.get((what, name))


def secret(**data: str) -> dict:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


OBJECTS = {("Secret", "db"): secret(password="s3cret", user="app"),
           ("ConfigMap", "app"): {"data": {"region": "eu-west-1", "PASSWORD": "from-config-map"}}}


def resolve(container: dict, objects=OBJECTS) -> tuple[dict[str, str], FakeKube]:
    k = FakeKube(objects)
    out = asyncio.run(env_of.resolve(k, "shop", {"serviceAccountName": "orders-driver"}, container,  # type: ignore[arg-type]
                                     pod_name="orders-dev-runner", uid="u-1", skip=frozenset({"POD_NAME"})))
    return out, k


def test_env_and_env_from_resolve_as_the_kubelet_does() -> None:
    out, k = resolve({
        "envFrom": [{"configMapRef": {"name": "app"}}, {"prefix": "DB_", "secretRef": {"name": "db"}}],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "region"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                {"name": "MODE", "value": "live"}]})
    assert out == {"region": "eu-west-1", "PASSWORD": "s3cret",  # env wins over envFrom's key
                   "DB_password": "s3cret", "DB_user": "app", "REGION": "eu-west-1", "NS": "shop",
                   "ME": "orders-dev-runner", "SA": "orders-driver", "MODE": "live"}
    assert "POD_NAME" not in out  # the runner's own
    assert sorted(set(k.gets)) == sorted(k.gets)  # each object read once


@pytest.mark.parametrize("container, expect", [
    ({"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "password"}}}]},
     "env PASSWORD: Secret shop/gone not found"),
    ({"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]},
     "env PASSWORD: key pw not found in Secret shop/db"),
    ({"env": [{"name": "R", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "region"}}}]},
     "env R: ConfigMap shop/nope not found"),
    ({"envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "nope"}}]},
     "envFrom[1]: ConfigMap shop/nope not found"),
])
def test_a_missing_ref_is_refused_naming_the_variable_and_the_object(container: dict, expect: str) -> None:
    with pytest.raises(env_of.MissingRef) as refused:
        resolve(container)
    assert str(refused.value) == expect


def test_an_optional_ref_that_is_missing_is_left_out() -> None:
    out, _ = resolve({"envFrom": [{"secretRef": {"name": "gone", "optional": True}}],
                      "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "x", "optional": True}}},
                              {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x",
                                                                              "optional": True}}}]})
    assert out == {}
