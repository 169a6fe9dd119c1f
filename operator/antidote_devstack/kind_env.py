"""`antidote dev build --kind`: everything hack/kind-up.sh needs on a machine without Docker,
built and cached here, and the environment that points the script at it (docs/kind.md):

    KIND_EXPERIMENTAL_PROVIDER=podman   kind's podman provider
    CONTAINERS_CONF=<cache>/kind/containers.conf   podman's rlimits this VM allows
    KIND_NODE_IMAGE=localhost/antidote/kind-node:<kube version>   (kind_node.py)
    ANTIDOTE_IMAGE_ARCHIVES="<operator>.tar <consumer>.tar"   `kind load image-archive`
    PATH=<cache>/kind/bin:...   kind, helm and kubectl at the pinned versions

written as a shell script to <cache>/kind/env.sh (`. ~/.cache/antidote/kind/env.sh`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from . import kind_node, project_images
from .build import build_go
from .errors import StackError
from .paths import cache_dir, venv_bin
from .steps import _require


def kind_dir() -> Path:
    return cache_dir() / "kind"


def _link(bin_dir: Path, name: str, target: Path) -> None:
    link = bin_dir / name
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def env_for(node_image: str, archives: list[Path], conf: Path, bin_dir: Path) -> dict[str, str]:
    """The variables hack/kind-up.sh reads, for these artefacts (pure)."""
    return {"KIND_EXPERIMENTAL_PROVIDER": "podman", "CONTAINERS_CONF": str(conf),
            "KIND_NODE_IMAGE": node_image,
            "ANTIDOTE_IMAGE_ARCHIVES": " ".join(str(a) for a in archives),
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def env_script(env: dict[str, str]) -> str:
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k != "PATH"]
    lines.append(f"export PATH={shlex.quote(env['PATH'].split(':', 1)[0])}:\"$PATH\"")
    return "\n".join(lines) + "\n"


def build() -> dict[str, str]:
    """Build kind, the node image and the project's images' archives; write env.sh; return
    the environment (PATH first entry: the folder with kind, helm and kubectl)."""
    if os.geteuid() != 0:
        raise StackError("build kind", "podman, mmdebstrap and buildah need root here (docs/kind.md)")
    _require("podman", "build kind", "apt-get install podman")
    out = kind_dir()
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    _link(bin_dir, "kind", build_go("kind"))
    _link(bin_dir, "helm", build_go("helm"))
    _link(bin_dir, "kubectl", venv_bin() / "kubectl")
    node_image = kind_node.node_image()
    _, operator = project_images.operator_image()
    _, consumer = project_images.consumer_image(archive=True)
    if operator is None or consumer is None:
        raise StackError("build kind", "the project's images were built without archives")
    conf = kind_node.containers_conf(out / "containers.conf")
    env = env_for(node_image, [operator, consumer], conf, bin_dir)
    (out / "env.sh").write_text(env_script(env))
    return env
