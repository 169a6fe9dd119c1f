"""The project's own images (docker/*.Dockerfile) built without Docker: buildah on local
stand-ins for the Dockerfiles' Docker Hub bases, cached content-addressed like the binaries.

    localhost/debian:bookworm-slim          (images.debian_base_image: mmdebstrap)
      -> localhost/antidote/python:3.11-bookworm    (hack/images/python.Containerfile)
           -> localhost/antidote/operator-deps:<version> -> operator:<version>
                                                    (docker/operator.Dockerfile)
           -> localhost/antidote/consumer-deps:<version> -> consumer:<version>
                                                    (docker/consumer.Dockerfile)
      -> localhost/antidote/maven:3.8-openjdk-17     (hack/images/maven.Containerfile; the
                                                      consumer's jar stage)

The Dockerfiles take their bases as build arguments (`PYTHON_IMAGE`, `MAVEN_IMAGE`) whose
defaults are Docker Hub's names, so `docker build` works as documented; here they point at
the stand-ins. Each image's key hashes its Containerfile, every file its COPY lines send,
the build arguments and its bases' keys; the stages before the last (`deps`: Java, the
pinned Python dependencies, the jars) are an image of their own, so a change to Antidote's
sources rebuilds only the last stage. The key is a label on the image in buildah's
storage and names its OCI archive in ~/.cache/antidote/images, so a warm build does nothing.
RUN steps reach the package registries from the host's network (`--network host`).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

from .steps import _digest
from .errors import StackError
from .images import _run_logged_append, buildah, debian_base_image, image_build
from .paths import HACK, cache_dir

ROOT = HACK.parent
KEY_LABEL = "antidote.dev/key"
PYTHON_BASE = "localhost/antidote/python:3.11-bookworm"
MAVEN_BASE = "localhost/antidote/maven:3.8-openjdk-17"


def _version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def operator_name() -> str:
    return f"localhost/antidote/operator:{_version()}"


def consumer_name() -> str:
    return f"localhost/antidote/consumer:{_version()}"


def _ignored(rel: str) -> bool:
    """.dockerignore as the project writes it: `*`, then `!path` exceptions, then patterns
    of files to leave out again (`**/__pycache__`, `**/*.pyc`)."""
    parts = rel.split("/")
    return "__pycache__" in parts or rel.endswith(".pyc")


def _tree_bytes(context: Path, sources: list[str]) -> list[bytes]:
    """Path and content of every file under `sources` (relative to `context`), sorted."""
    out: list[bytes] = []
    for src in sources:
        top = context / src
        if not top.exists():
            raise StackError("build images", f"COPY source {src} missing in {context}")
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(context).as_posix()
            if not _ignored(rel):
                out += [rel.encode(), f.read_bytes()]
    return out


def copy_sources(containerfile: str) -> list[str]:
    """The local sources of a Containerfile's COPY lines (not `COPY --from=<stage>`)."""
    sources: list[str] = []
    for line in re.findall(r"^COPY (?!--from)(.+)$", containerfile, re.M):
        sources += line.split()[:-1]
    return sources


def extra_ca_certificates() -> dict[str, bytes]:
    """Certificates in the host's trust bundle that Debian's ca-certificates does not ship
    (a TLS-inspecting proxy's CA): RUN steps must trust them to reach the registries.
    Empty on a machine that trusts only Debian's set."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.exists():
        return {}
    pem = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)

    def blocks(data: bytes) -> list[bytes]:
        return [base64.b64decode(b"".join(m.split())) for m in pem.findall(data)]

    debian = set()
    for crt in Path("/usr/share/ca-certificates").rglob("*.crt"):
        debian.update(blocks(crt.read_bytes()))
    extra = [der for der in blocks(bundle.read_bytes()) if der not in debian]
    return {f"host-{_digest(der)[:12]}.crt":
            b"-----BEGIN CERTIFICATE-----\n"
            + b"\n".join(base64.encodebytes(der).split()) + b"\n-----END CERTIFICATE-----\n"
            for der in extra}


def image_key(name: str) -> str | None:
    """The cache key an image built here carries, None for an image not in the storage."""
    return _image_key(buildah(), name)


def _image_key(bah: list[str], name: str) -> str | None:
    out = subprocess.run([*bah, "inspect", "--type", "image", "--format",
                          f'{{{{index .OCIv1.Config.Labels "{KEY_LABEL}"}}}}', name],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def _build(name: str, stem: str, key: str, bud: Callable[[Path], list[str]],
           archive: bool = True) -> Path | None:
    """Build `name` with `buildah bud` (arguments from `bud(workdir)`) unless buildah's
    storage holds it with this key (and, with `archive`, its OCI archive exists); returns
    the archive, for containerd (the stand-in bases are only built FROM, so none)."""
    bah = buildah()
    target = cache_dir() / "images" / f"{stem}-{key}.tar"
    built = _image_key(bah, name) == key
    if built and (target.exists() or not archive):
        return target if archive else None
    # The archive is most of an image's build time when only its last layer changed: buildah
    # writes every layer out again (~25 s for the consumer image's 880 MB on 2 cores), so an
    # image only built upon (the consumer image under the tests' handler image) gets none
    # until a node loads it.
    what = f"archiving the image {name}" if built else f"building the image {name} with buildah"
    with image_build(stem, target, what) as (work, log):
        if not built:
            _run_logged_append([*bah, "bud", "--network", "host", "--pull-never", "--layers=false",
                                "--label", f"{KEY_LABEL}={key}", "-t", name, *bud(work)], work, log)
        if archive:
            # Uncompressed: the archive only goes to containerd on the same machine.
            _run_logged_append([*bah, "push", "--quiet", "--disable-compression", name,
                                f"oci-archive:{work / 'image.tar'}:{name}"], work, log)
            os.replace(work / "image.tar", target)
    # buildah's storage holds one image per name, so an older archive is stale.
    for old in target.parent.glob(f"{stem}-*.tar"):
        if old != target:
            old.unlink()
    # An image built before under this name (an older key) is left untagged: drop it.
    subprocess.run([*bah, "rmi", "--prune"], capture_output=True)
    return target if archive else None


def _stand_in(name: str, stem: str) -> tuple[str, str]:
    """A base built from hack/images/<stem>.Containerfile on the Debian base image, with the
    host's extra CA certificates in its build context."""
    base, _ = debian_base_image()
    base_key = _image_key(buildah(), base)
    containerfile = HACK / "images" / f"{stem}.Containerfile"
    certs = extra_ca_certificates()
    key = _digest(containerfile.read_bytes(), (base_key or "").encode(), name.encode(),
                  *[b for item in sorted(certs.items()) for b in (item[0].encode(), item[1])])

    def bud(work: Path) -> list[str]:
        (work / "ca").mkdir()
        for file, data in certs.items():
            (work / "ca" / file).write_bytes(data)
        shutil.copy(containerfile, work / "Containerfile")
        return ["--build-arg", f"BASE={base}", "-f", str(work / "Containerfile"), str(work)]

    _build(name, stem, key, bud, archive=False)
    return name, key


def python_base_image() -> tuple[str, str]:
    """(name, key) of the stand-in for python:3.11-slim-bookworm."""
    return _stand_in(PYTHON_BASE, "python")


def maven_base_image() -> tuple[str, str]:
    """(name, key) of the stand-in for maven:3.9-eclipse-temurin-17."""
    return _stand_in(MAVEN_BASE, "maven")


# A Dockerfile whose last stage starts `FROM ${DEPS}` (the `deps` stage by default) is built
# in two: the deps stage on its own, then the last stage FROM that image.
LAST_STAGE = re.compile(r"^FROM \$\{DEPS\}$", re.M)


def deps_name(name: str) -> str:
    """localhost/antidote/consumer:0.1.0 -> localhost/antidote/consumer-deps:0.1.0"""
    repo, tag = name.rsplit(":", 1)
    return f"{repo}-deps:{tag}"


def build_image(name: str, dockerfile: Path, stem: str, args: dict[str, str],
                base_keys: list[str], context: Path = ROOT,
                archive: bool = True) -> tuple[str, Path | None]:
    """(name, OCI archive; None without `archive`: in buildah's storage only, to build
    upon) of a Dockerfile built in `context` with these build arguments,
    cached by its text, its COPY sources, the arguments and `base_keys` (its bases' keys;
    `image_key(name)` of an image built here). With a last stage `FROM ${DEPS}`, the stages
    before it are built first as their own image, keyed by their text and COPY sources
    only: a change to the last stage's sources (Antidote's) leaves that image as it is."""
    text = dockerfile.read_text()
    last = LAST_STAGE.search(text)
    sources = copy_sources(text)
    if last:
        head = text[:last.start()]
        deps = deps_name(name)
        head_key = _key(head, deps, args, base_keys, context, copy_sources(head))
        _build(deps, f"{stem}-deps", head_key,
               lambda _work: [*_build_args(args), "--target", "deps", "-f", str(dockerfile), str(context)],
               archive=False)
        args, base_keys, sources = {**args, "DEPS": deps}, [head_key], copy_sources(text[last.start():])
    return name, _build(name, stem, _key(text, name, args, base_keys, context, sources),
                        lambda _work: [*_build_args(args), "-f", str(dockerfile), str(context)],
                        archive)


def _key(text: str, name: str, args: dict[str, str], base_keys: list[str], context: Path,
         sources: list[str]) -> str:
    """An image's cache key: its Containerfile text, name, build arguments, bases' keys and
    the files `sources` names (its COPY lines')."""
    return _digest(text.encode(), name.encode(), *[f"{k}={v}".encode() for k, v in sorted(args.items())],
                   *[k.encode() for k in base_keys], *_tree_bytes(context, sources))


def _build_args(args: dict[str, str]) -> list[str]:
    return [a for k, v in sorted(args.items()) for a in ("--build-arg", f"{k}={v}")]


def operator_image() -> tuple[str, Path]:
    """(name, OCI archive) of docker/operator.Dockerfile built on the local Python base."""
    python, python_key = python_base_image()
    return _archived(build_image(operator_name(), ROOT / "docker/operator.Dockerfile", "operator",
                                 {"PYTHON_IMAGE": python}, [python_key]))


def consumer_image(archive: bool = True) -> tuple[str, Path | None]:
    """(name, OCI archive) of docker/consumer.Dockerfile on the local Python and Maven bases;
    without `archive`, (name, None): the image in buildah's storage, to build upon."""
    python, python_key = python_base_image()
    maven, maven_key = maven_base_image()
    return build_image(consumer_name(), ROOT / "docker/consumer.Dockerfile", "consumer",
                       {"PYTHON_IMAGE": python, "MAVEN_IMAGE": maven}, [python_key, maven_key],
                       archive=archive)


def _archived(built: tuple[str, Path | None]) -> tuple[str, Path]:
    """(name, OCI archive) of an image built with its archive (build_image's default)."""
    name, archive = built
    if archive is None:
        raise StackError("build images", f"{name} was built without its OCI archive")
    return name, archive


def build_all() -> dict[str, Path]:
    """Both images built; the operator's archived for the node. The consumer image's archive
    is made by the first node that loads it (the demo): the tests load their handler image,
    built upon it, instead."""
    if os.geteuid() != 0:
        raise StackError("build images", "buildah needs root here (docs/images.md)")
    consumer_image(archive=False)
    return {"operator-image": operator_image()[1]}


def load_into_node(state_dir: Path) -> dict[str, str]:
    """Both images built (or found cached) with their archives, and loaded into the running
    node of the stack in `state_dir` (containerd's `k8s.io` namespace), under the names
    `hack/local-images.values.yaml` gives the chart: {"operator": name, "consumer": name}.
    What `antidote dev load-images` and the demo run, so that `helm install ... -f
    hack/local-images.values.yaml` finds them (docs/node.md)."""
    from . import node

    if os.geteuid() != 0:
        raise StackError("load images", "buildah and the node's containerd need root here (docs/node.md)")
    loaded = {}
    for role, (name, archive) in (("operator", operator_image()), ("consumer", _archived(consumer_image()))):
        node.load_image(state_dir, name, archive)
        loaded[role] = name
    return loaded
