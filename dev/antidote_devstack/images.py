"""Container images for the node, built locally (no registry, no Docker engine) and cached
content-addressed in ~/.cache/antidote/images as OCI archives that `ctr images import` loads.

The sandbox (pause) image: `build/pause/linux/pause.c` from the same `k8s.io/kubernetes`
module as the kubelet, compiled statically with gcc and packed with umoci, tagged as
upstream tags it (`TAG` in `build/pause/Makefile`). A busybox image (Debian's static
busybox) for tests that run a command in a pod. A Debian base image (mmdebstrap, committed
with buildah), the base the project's images build on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .steps import _digest, _go_env, _require, _run_logged
from .errors import StackError
from .paths import HACK, cache_dir
from .progress import step

PAUSE_REPO = "registry.k8s.io/pause"


def _kubernetes_module_dir() -> Path:
    """The `k8s.io/kubernetes` module of hack/k8s, downloaded into the Go module cache."""
    out = subprocess.run(["go", "mod", "download", "-json", "k8s.io/kubernetes"],
                         cwd=HACK / "k8s", env=_go_env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise StackError("build pause image", f"go mod download k8s.io/kubernetes: {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["Dir"])


def pause_tag(module_dir: Path) -> str:
    match = re.search(r"^TAG \?= (\S+)$", (module_dir / "build/pause/Makefile").read_text(), re.M)
    if not match:
        raise StackError("build pause image", "no `TAG ?=` in build/pause/Makefile of k8s.io/kubernetes")
    return match.group(1)


def _tool_version(*cmd: str) -> bytes:
    return subprocess.run(list(cmd), capture_output=True, check=True).stdout


def pause_image() -> tuple[str, Path]:
    """(image name, OCI archive) of the sandbox image, building it when the cache has none."""
    module = _kubernetes_module_dir()
    tag = pause_tag(module)
    name = f"{PAUSE_REPO}:{tag}"
    source = (module / "build/pause/linux/pause.c").read_bytes()
    gcc = _require("gcc", "build pause image", "apt-get install gcc libc6-dev")

    def fill(work: Path, rootfs: Path, log: Path) -> None:
        (work / "pause.c").write_bytes(source)
        # Upstream's flags (build/pause/Makefile), REV 0.
        _run_logged_append([gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-0",
                            "-o", str(rootfs / "pause"), str(work / "pause.c")], work, log)

    return name, _pack(name, "pause", fill, ["--config.entrypoint", "/pause"],
                       key=(source, _tool_version(gcc, "--version")))


def busybox_image() -> tuple[str, Path]:
    """A small image for tests that run a command in a pod (nslookup, nc, od): Debian's
    statically linked busybox (package busybox-static), its applets linked in /bin."""
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise StackError("build busybox image", "/bin/busybox missing (apt-get install busybox-static)")
    version = _tool_version(str(busybox), "--help").decode().split()[1].lstrip("v")
    name = f"localhost/antidote/busybox:{version}"
    binary = busybox.read_bytes()
    if _dynamic(binary):  # Debian's `busybox` is; the image has no libc
        raise StackError("build busybox image", "/bin/busybox is dynamically linked; the image "
                         "needs Debian's busybox-static")

    def fill(work: Path, rootfs: Path, log: Path) -> None:
        (rootfs / "bin").mkdir(exist_ok=True)
        (rootfs / "bin/busybox").write_bytes(binary)
        (rootfs / "bin/busybox").chmod(0o755)
        applets = _tool_version(str(busybox), "--list").decode().split()
        for applet in applets:
            if applet != "busybox":
                (rootfs / "bin" / applet).symlink_to("busybox")
        (rootfs / "tmp").mkdir(mode=0o1777, exist_ok=True)

    return name, _pack(name, "busybox", fill,
                       ["--config.env", "PATH=/bin", "--config.cmd", "sh"], key=(binary,))


DEBIAN_SUITE = "bookworm"
DEBIAN_BASE = f"localhost/debian:{DEBIAN_SUITE}-slim"
DEBIAN_INCLUDE = ("ca-certificates",)


def buildah() -> list[str]:
    """buildah with its storage in the cache (vfs: no overlay mounts to clean up), so the
    images built here are cached like the binaries and later builds start FROM them. The
    runroot (locks, transient state) is one per storage, so builds into two caches (a cold
    build timed beside the warm cache) never share it."""
    return [_require("buildah", "build images", "apt-get install buildah"), *buildah_storage()]


def buildah_storage() -> list[str]:
    """buildah's options for the project's storage (pure: no buildah needed to name them)."""
    root = cache_dir() / "buildah"
    runroot = "/run/antidote-buildah-" + hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return ["--root", str(root), "--runroot", runroot, "--storage-driver", "vfs"]


def debian_base_image() -> tuple[str, Path]:
    """The Debian base image (`localhost/debian:bookworm-slim`, the role Docker Hub's
    debian:bookworm-slim plays): `mmdebstrap --variant=minbase` committed with buildah into
    its storage in the cache, and an OCI archive of it for containerd. Cached by the suite,
    the packages asked for and the tools' versions: the suite's packages are those of the
    day of the first build until one of these changes."""
    if os.geteuid() != 0:
        raise StackError("build debian image", "mmdebstrap and buildah need root here")
    mmdebstrap = _require("mmdebstrap", "build debian image", "apt-get install mmdebstrap")
    bah = buildah()
    key = _digest(DEBIAN_SUITE.encode(), " ".join(DEBIAN_INCLUDE).encode(),
                  _tool_version(mmdebstrap, "--version"), _tool_version(bah[0], "--version"))
    target = cache_dir() / "images" / f"debian-{key}.tar"
    label = "antidote.dev/key"
    have = subprocess.run([*bah, "inspect", "--type", "image", "--format",
                           f'{{{{index .OCIv1.Config.Labels "{label}"}}}}', DEBIAN_BASE],
                          capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.strip() == key and target.exists():
        return DEBIAN_BASE, target
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "logs" / "build-debian-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    with step(f"building the image {DEBIAN_BASE} with mmdebstrap and buildah (log {log})"), \
            tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp)
        _run_logged_append([mmdebstrap, "--quiet", "--mode=root", "--variant=minbase",
                            f"--include={','.join(DEBIAN_INCLUDE)}", DEBIAN_SUITE,
                            str(work / "rootfs.tar")], work, log)
        container = subprocess.run([*bah, "from", "scratch"], capture_output=True, text=True,
                                   check=True).stdout.strip()
        try:
            for cmd in ([*bah, "add", container, str(work / "rootfs.tar"), "/"],
                        [*bah, "config", "--label", f"{label}={key}", "--env",
                         "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "--cmd", "bash", container],
                        [*bah, "commit", "--quiet", container, DEBIAN_BASE]):
                _run_logged_append(cmd, work, log)
        finally:
            subprocess.run([*bah, "rm", container], capture_output=True)
        _run_logged_append([*bah, "push", "--quiet", DEBIAN_BASE,
                            f"oci-archive:{work / 'image.tar'}:{DEBIAN_BASE}"], work, log)
        os.replace(work / "image.tar", target)
    return DEBIAN_BASE, target


def _dynamic(elf: bytes) -> bool:
    """Whether an ELF64 executable asks for a program interpreter (PT_INTERP)."""
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    size, count = int.from_bytes(elf[0x36:0x38], "little"), int.from_bytes(elf[0x38:0x3A], "little")
    return any(int.from_bytes(elf[phoff + i * size:phoff + i * size + 4], "little") == 3
               for i in range(count))


def _pack(name: str, stem: str, fill, config: list[str], key: tuple[bytes, ...],
          user: str = "65534:65534") -> Path:
    """An OCI archive of one layer that `fill(work, rootfs, log)` writes, running as `user`
    (by default 65534:65534, nobody: pods under the restricted standard run as non-root),
    cached by `key`, the name, the config, the user and umoci's version."""
    umoci = _require("umoci", f"build {stem} image", "apt-get install umoci")
    digest = _digest(*key, name.encode(), " ".join(config).encode(), _tool_version(umoci, "--version"),
                     *([user.encode()] if user != "65534:65534" else []))
    target = cache_dir() / "images" / f"{stem}-{digest}.tar"
    if target.exists():
        return target
    with image_build(stem, target, f"building the image {name}") as (work, log):
        layout, bundle = work / "layout", work / "bundle"
        ref = f"{layout}:{name}"
        for cmd in ([umoci, "init", "--layout", str(layout)], [umoci, "new", "--image", ref],
                    [umoci, "unpack", "--image", ref, str(bundle)]):
            _run_logged_append(cmd, work, log)
        fill(work, bundle / "rootfs", log)
        for cmd in ([umoci, "repack", "--image", ref, str(bundle)],
                    [umoci, "config", "--image", ref, "--config.user", user, *config],
                    [umoci, "gc", "--layout", str(layout)],
                    ["tar", "-C", str(layout), "-cf", str(work / "image.tar"), "."]):
            _run_logged_append(cmd, work, log)
        os.replace(work / "image.tar", target)
    return target


@contextlib.contextmanager
def image_build(stem: str, target: Path, what: str) -> Iterator[tuple[Path, Path]]:
    """(a scratch folder beside `target`, so the archive lands by rename; a fresh build log)
    for building the image `stem`, under a progress step saying `what`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "logs" / f"build-{stem}-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    with step(f"{what} (log {log})"), tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        yield Path(tmp), log


def _run_logged_append(cmd: list[str], cwd: Path, log: Path) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        rc = subprocess.call(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        raise StackError("build image", f"`{cmd[0]}` exit {rc}; last lines of {log}:\n{tail}")


def build_all() -> dict[str, Path]:
    return {"pause-image": pause_image()[1], "busybox-image": busybox_image()[1],
            "debian-image": debian_base_image()[1]}


def load(ctr: Path, address: Path, name: str, archive: Path, log: Path) -> None:
    """Import an OCI archive into containerd's `k8s.io` namespace under `name` only.

    `ctr images import` also names the image after the archive's own tag, prefixed
    `import-<date>`; the CRI may resolve the sandbox to that second name and fail, so it goes.
    """
    base = [str(ctr), "--address", str(address), "--namespace", "k8s.io"]
    _run_logged([*base, "images", "import", "--index-name", name, str(archive)],
                archive.parent, dict(os.environ), log, f"load image {name}")
    listed = subprocess.run([*base, "images", "list", "--quiet"], capture_output=True, text=True,
                            check=True).stdout.split()
    extra = [n for n in listed if n.startswith("import-")]
    listed = [n for n in listed if n not in extra]
    if extra:
        _run_logged([*base, "images", "remove", *extra], archive.parent, dict(os.environ), log,
                    f"load image {name}")
    if name not in listed:
        raise StackError(f"load image {name}", f"not in containerd after import (found {listed})")

