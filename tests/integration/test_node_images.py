"""The project's images as a user gets them (docs/images.md, docs/node.md), as root:

- `make images` (`antidote dev images`) builds both images with buildah and pushes them to a
  real registry (CNCF Distribution's, built from its Go module, on loopback, plain HTTP);
  the registry's API lists each tag and serves its manifest and every blob, and the operator
  image pulls back into an empty buildah storage and runs its entrypoint;
- `antidote dev load-images` loads them into a running node, and `helm install ... -f
  hack/local-images.values.yaml` by hand (as docs/node.md shows) runs the operator pod.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from antidote_devstack import build, images
from antidote_devstack import stack as devstack
from antidote_devstack.paths import cache_dir

from .node_util import restricted_namespace, wait

pytestmark = [
    pytest.mark.integration,
    pytest.mark.node,
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah and the node need root (docs/node.md)"),
]

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_TYPES = ", ".join(["application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"])


def _antidote() -> str:
    import sys

    return str(Path(sys.executable).parent / "antidote")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, accept: str | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, dict(resp.headers), resp.read()


@pytest.fixture
def registry(tmp_path: Path):
    """A registry on loopback (plain HTTP), its storage in tmp_path: its address."""
    binary = build.build_go("registry")
    port = _free_port()
    cfg = tmp_path / "registry.yml"
    cfg.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
                   f"{tmp_path / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = open(tmp_path / "registry.log", "wb")
    proc = subprocess.Popen([str(binary), "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            try:
                return _get(f"http://127.0.0.1:{port}/v2/")[0] == 200
            except OSError:
                return proc.poll() is not None  # exited: stop waiting, the assert below says so
        wait("the registry answers /v2/", up, 60)
        assert proc.poll() is None, (tmp_path / "registry.log").read_text()
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_make_images_pushes_both_images_and_they_pull_back(registry: str, tmp_path: Path) -> None:
    tag = f"t-{uuid.uuid4().hex[:8]}"
    repo = f"{registry}/antidote-test"
    out = subprocess.run([_antidote(), "dev", "images", "--registry", repo, "--tag", tag,
                          "--local-bases", "--tls-verify", "false"],
                         capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stdout + out.stderr
    refs = {role: f"{repo}/antidote-{role}:{tag}" for role in ("operator", "consumer")}
    assert [line for line in out.stdout.splitlines() if line.startswith("pushed ")] == \
        [f"pushed {refs['operator']}", f"pushed {refs['consumer']}"]
    try:
        for role in refs:
            name = f"antidote-test/antidote-{role}"
            _, _, body = _get(f"http://{registry}/v2/{name}/tags/list")
            assert tag in json.loads(body)["tags"], (role, body)
            status, headers, body = _get(f"http://{registry}/v2/{name}/manifests/{tag}", MANIFEST_TYPES)
            manifest = json.loads(body)
            assert status == 200 and manifest["layers"], manifest
            for blob in [manifest["config"], *manifest["layers"]]:  # every blob is there, whole
                status, headers, _ = _get(f"http://{registry}/v2/{name}/blobs/{blob['digest']}", method="HEAD")
                assert status == 200 and int(headers["Content-Length"]) == blob["size"], blob
        # Pulled back into an empty storage: from the registry, not from the builder's.
        bah = ["buildah", "--root", str(tmp_path / "pull"), "--runroot", str(tmp_path / "pull-run"),
               "--storage-driver", "vfs"]
        pulled = subprocess.run([*bah, "pull", "--quiet", "--tls-verify=false", f"docker://{refs['operator']}"],
                                capture_output=True, text=True, timeout=900)
        assert pulled.returncode == 0, pulled.stderr
        conf = json.loads(subprocess.run([*bah, "inspect", "--type", "image", refs["operator"]],
                                         capture_output=True, text=True, check=True).stdout)
        assert conf["OCIv1"]["config"]["Entrypoint"] == ["antidote"]
        assert conf["OCIv1"]["config"]["User"] == "10001:10001"
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path / "pull")], capture_output=True)
        # The pushed names go from the builder's storage; the images stay under their own.
        subprocess.run([*images.buildah(), "rmi", *refs.values()], capture_output=True)


def test_load_images_then_helm_install_by_hand_runs_the_operator() -> None:
    state_dir = cache_dir() / "test-load-images-stack"
    s = devstack.up(state_dir, node=True)
    env = {**os.environ, **s.env()}
    try:
        out = subprocess.run([_antidote(), "dev", "load-images", "--dir", str(state_dir)],
                             capture_output=True, text=True, env=env, timeout=1800)
        assert out.returncode == 0, out.stdout + out.stderr
        api = config.new_client_from_config(config_file=s.kubeconfig)
        core = client.CoreV1Api(api)
        ns = restricted_namespace(core, "antidote-system")
        # docs/node.md's command, word for word but the namespace.
        helm = subprocess.run(["helm", "install", "antidote", str(ROOT / "charts/antidote"), "-n", ns,
                               "-f", str(ROOT / "hack/local-images.values.yaml"), "--wait", "--timeout", "300s"],
                              capture_output=True, text=True, env=env, timeout=400)
        assert helm.returncode == 0, helm.stdout + helm.stderr
        pods = core.list_namespaced_pod(ns).items
        assert [p.status.phase for p in pods] == ["Running"], [(p.metadata.name, p.status.phase) for p in pods]
        assert all(c.ready for c in pods[0].status.container_statuses)
        subprocess.run(["helm", "uninstall", "antidote", "-n", ns, "--wait"], env=env, capture_output=True,
                       timeout=300)
    finally:
        devstack.down(state_dir)
