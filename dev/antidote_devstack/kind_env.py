"""`antidote dev build --kind`: everything hack/kind-up.sh needs on a machine without Docker,
built and cached here, and the environment that points the script at it (docs/kind.md):

    KIND_EXPERIMENTAL_PROVIDER=podman   kind's podman provider
    CONTAINERS_CONF=<cache>/kind/containers.conf   podman's rlimits this VM allows
    KIND_NODE_IMAGE=localhost/antidote/kind-node:<kube version>   (kind_node.py)
    ANTIDOTE_IMAGE_ARCHIVES="<operator>.tar <consumer>.tar"   docker-archives for
                                                    `kind load image-archive`
    PATH=<cache>/kind/bin:...   kind, helm and kubectl at the pinned versions

written as a shell script to <cache>/kind/env.sh (`. ~/.cache/antidote/kind/env.sh`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from . import kind_node, project_images
from .build import build_go, ensure_node_packages
from .errors import StackError
from .images import _run_logged_append, buildah, image_build
from .paths import cache_dir, venv_bin
from .progress import say
from .steps import _require


def kind_dir() -> Path:
    return cache_dir() / "kind"


def _link(bin_dir: Path, name: str, target: Path) -> None:
    link = bin_dir / name
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


# kind's provider here (Debian's podman: 4.3.1 on bookworm, with runc and its CNI plugins).
KIND_PACKAGES = {"/usr/bin/podman": "podman"}
MODULES = Path("/lib/modules")


def ensure_modules_dir(modules: Path = MODULES) -> None:
    """kind binds the host's /lib/modules into every node, read-only, and podman refuses a
    bind of a path that does not exist; a VM whose kernel has its drivers built in (this
    one) has none: an empty one stands for "no loadable modules"."""
    if not modules.exists():
        say(f"creating {modules} (empty: this kernel has no loadable modules; kind binds it into its nodes)")
        modules.mkdir(parents=True)


def docker_archive(name: str) -> Path:
    """A docker-archive of an image built here (in buildah's storage), for `kind load
    image-archive`: kind imports it with `ctr images import`, which names an image after a
    docker-archive's RepoTags, while an OCI archive's image would get ctr's `import-<date>`
    name instead. Cached by the image's key, in <cache>/kind/archives."""
    key = project_images.image_key(name)
    if not key:
        raise StackError("build kind", f"{name} is not in buildah's storage (build it first)")
    stem = name.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    target = kind_dir() / "archives" / f"{stem}-{key}.tar"
    if target.exists():
        return target
    with image_build(f"kind-{stem}-archive", target, f"archiving {name} for kind") as (work, log):
        _run_logged_append([*buildah(), "push", "--quiet", name,
                            f"docker-archive:{work / 'image.tar'}:{name}"], work, log)
        os.replace(work / "image.tar", target)
    for old in target.parent.glob(f"{stem}-*.tar"):
        if old != target:
            old.unlink()
    return target


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
    ensure_node_packages(KIND_PACKAGES)
    _require("podman", "build kind", "apt-get install podman")
    ensure_modules_dir()
    out = kind_dir()
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    _link(bin_dir, "kind", build_go("kind"))
    _link(bin_dir, "helm", build_go("helm"))
    _link(bin_dir, "kubectl", venv_bin() / "kubectl")
    node_image = kind_node.node_image()
    operator, _ = project_images.operator_image()
    consumer, _ = project_images.consumer_image(archive=False)
    archives = [docker_archive(operator), docker_archive(consumer)]
    conf = kind_node.containers_conf(out / "containers.conf")
    env = env_for(node_image, archives, conf, bin_dir)
    (out / "env.sh").write_text(env_script(env))
    return env
