"""`make images REGISTRY=... TAG=...` (`antidote dev images`): the operator and consumer images
built from docker/*.Dockerfile with whichever builder the machine has, and pushed.

- docker (when its daemon answers) or podman: `<tool> build` with the Dockerfiles' own bases
  (Docker Hub's), then `<tool> push`;
- buildah: `buildah bud` in the project's buildah storage (`images.buildah_storage()`, the node's
  builder's), with the Dockerfiles' own bases, then `buildah push`; or, with `local_bases`,
  the images the node's builder makes on its local stand-ins (`project_images`, cached),
  tagged and pushed: for machines that reach no Docker Hub (docs/images.md says when not to
  push those).

Images are named `<registry>/antidote-operator:<tag>` and `<registry>/antidote-consumer:<tag>`,
what the chart's `image.repository` and `consumer.image.repository` then point at.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from . import images, project_images
from .errors import StackError
from .progress import step

ROOT = project_images.ROOT
ROLES = ("operator", "consumer")
TOOLS = ("docker", "podman", "buildah")


def image_refs(registry: str, tag: str) -> dict[str, str]:
    """{"operator": ref, "consumer": ref} for `registry` (host[:port][/path]) and `tag`."""
    registry = registry.strip().rstrip("/")
    if not registry or "://" in registry or " " in registry:
        raise StackError("images", f"REGISTRY {registry!r}: give host[:port][/path], e.g. ghcr.io/you")
    if not tag or not all(c.isalnum() or c in "._-" for c in tag) or len(tag) > 128 or tag[0] in ".-":
        raise StackError("images", f"TAG {tag!r}: an image tag is [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}")
    return {role: f"{registry}/antidote-{role}:{tag}" for role in ROLES}


def _docker_answers(docker: str) -> bool:
    """A docker client is not enough: its daemon must answer."""
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_tool(asked: str | None = None) -> str:
    """The builder: `asked`, else the first of docker (daemon up), podman, buildah present."""
    for tool in ([asked] if asked else TOOLS):
        if tool not in TOOLS:
            raise StackError("images", f"builder {tool!r}: one of {', '.join(TOOLS)}")
        path = shutil.which(tool)
        if path and (tool != "docker" or _docker_answers(path)):
            return tool
        if asked:
            why = "its daemon does not answer (`docker info`)" if path else "not installed"
            raise StackError("images", f"builder {tool}: {why}")
    raise StackError("images", "no image builder: install docker (with its daemon), podman or buildah")


def qualified_bases(dockerfile: str) -> list[str]:
    """`--build-arg` pairs naming the Dockerfile's default bases (its `ARG *_IMAGE=` lines)
    fully: podman and buildah refuse Docker Hub's short names (`python:3.11-slim-bookworm`)
    unless the machine's registries.conf says where to look; docker.io is what docker means."""
    out = []
    for name, image in re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", dockerfile, re.M):
        first = image.split("/", 1)[0]
        if "/" not in image:
            image = f"docker.io/library/{image}"
        elif "." not in first and ":" not in first and first != "localhost":
            image = f"docker.io/{image}"
        out += ["--build-arg", f"{name}={image}"]
    return out


def commands(tool: str, refs: dict[str, str], *, tls_verify: bool = True,
             push: bool = True) -> list[list[str]]:
    """The build and push commands of both images with the Dockerfiles' own bases (pure)."""
    # The tool by name (choose_tool found it), so that this stays pure and testable anywhere.
    base = [tool, *images.buildah_storage()] if tool == "buildah" else [tool]
    build = ["bud", "--network", "host"] if tool == "buildah" else ["build"]
    tls = [] if tls_verify or tool == "docker" else ["--tls-verify=false"]
    out = []
    for role, ref in refs.items():
        dockerfile = ROOT / "docker" / f"{role}.Dockerfile"
        bases = [] if tool == "docker" else qualified_bases(dockerfile.read_text())
        out.append([*base, *build, *bases, "-f", str(dockerfile), "-t", ref, str(ROOT)])
        if push:
            out.append([*base, "push", *tls, ref] + ([f"docker://{ref}"] if tool == "buildah" else []))
    return out


def build_and_push(registry: str, tag: str, *, tool: str | None = None, local_bases: bool = False,
                   tls_verify: bool = True, push: bool = True) -> dict[str, str]:
    """Build both images and push them; {"operator": ref, "consumer": ref}."""
    refs = image_refs(registry, tag)
    tool = "buildah" if local_bases else choose_tool(tool)
    log = project_images.cache_dir() / "logs" / "make-images.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    if local_bases:
        if tool != "buildah" or not shutil.which("buildah"):
            raise StackError("images", "--local-bases builds with buildah (not installed)")
        built = {"operator": project_images.operator_image()[0],
                 "consumer": project_images.consumer_image(archive=False)[0]}
        bah = images.buildah()
        cmds = [[*bah, "tag", built[role], refs[role]] for role in ROLES]
        if push:
            cmds += [[*bah, "push", *([] if tls_verify else ["--tls-verify=false"]), refs[role],
                      f"docker://{refs[role]}"] for role in ROLES]
    else:
        cmds = commands(tool, refs, tls_verify=tls_verify, push=push)
    for cmd in cmds:
        with step(f"{tool}: {describe(cmd)} (log {log})"):
            images._run_logged_append(cmd, ROOT, log)
    return refs


def describe(cmd: list[str]) -> str:
    """`build REF`, `tag REF` or `push REF` of one of the commands above."""
    if "-t" in cmd:
        return f"build {cmd[cmd.index('-t') + 1]}"
    if "push" in cmd:
        return f"push {cmd[cmd.index('push') + 1 + ('--tls-verify=false' in cmd)]}"
    return f"tag {cmd[-1]}"
