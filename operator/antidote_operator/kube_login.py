"""The operator's credentials for the API server, read with Kopf's own login functions, so
Kopf (its watches and patches) and `kube.Kube` (the operator's requests) use the same ones.

In a pod: the service account (`kopf.login_with_service_account`; the token file is read
again at each login, so a rotated token is picked up on the next 401). Elsewhere:
$KUBECONFIG or ~/.kube/config (`kopf.login_with_kubeconfig`): a server, a CA, a client
certificate and key, or a token. Not supported outside a cluster: kubeconfig users with an
`exec` credential plugin (cloud CLIs such as `aws eks get-token`, `gke-gcloud-auth-plugin`)
— running them is what the `kubernetes` package did, which the operator no longer imports
(docs/operator.md, Limits). Such a kubeconfig is refused at start, naming the user.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import kopf
import yaml

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class LoginRefused(Exception):
    """The operator cannot log in with these credentials; the message says why."""


def login(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """The service account in a pod, else the current context of the kubeconfig."""
    settings = settings or kopf.OperatorSettings()
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if host and port and os.path.exists(SERVICE_ACCOUNT_TOKEN):
        info = kopf.login_with_service_account(settings=settings)
        if info is not None:
            # As the `kubernetes` package did in a pod: the Service's address from the
            # environment, so the operator does not depend on cluster DNS to reach it.
            host = f"[{host}]" if ":" in host else host
            return dataclasses.replace(info, server=f"https://{host}:{port}")
    paths = kubeconfig_paths()
    if not paths:
        raise LoginRefused("no credentials: not in a pod (no service account) and no kubeconfig "
                           "($KUBECONFIG or ~/.kube/config)")
    current = current_entries(paths)
    check_user(*current["user"])
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise LoginRefused(f"no credentials in the kubeconfig {os.pathsep.join(map(str, paths))}")
    return relative_paths_resolved(info, current)


def kubeconfig_paths() -> list[Path]:
    """As kubectl and Kopf read them: $KUBECONFIG's files (the first value of a key wins),
    else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    default = Path("~/.kube/config").expanduser()
    return [default] if default.exists() else []


def current_entries(paths: list[Path]) -> dict[str, tuple[str, dict[str, Any], Path]]:
    """The current context's user and cluster: (name, entry, the file that defined it)."""
    current: str | None = None
    found: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {"contexts": {}, "clusters": {}, "users": {}}
    for path in paths:
        try:  # a $KUBECONFIG naming a missing or broken file: one line, not a traceback
            config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as err:
            raise LoginRefused(f"cannot read the kubeconfig {path}: {err.strerror}") from None
        except yaml.YAMLError as err:
            raise LoginRefused(f"the kubeconfig {path} is not YAML: {str(err).splitlines()[0]}") from None
        if not isinstance(config, dict):
            raise LoginRefused(f"the kubeconfig {path} is not a kubeconfig (not a mapping)")
        current = current or config.get("current-context")
        for section, key in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in config.get(section) or []:
                found[section].setdefault(item["name"], (item.get(key) or {}, path))
    if not current or current not in found["contexts"]:
        raise LoginRefused(f"the kubeconfig {os.pathsep.join(map(str, paths))} has no current context")
    context = found["contexts"][current][0]
    out = {}
    for what, section in (("user", "users"), ("cluster", "clusters")):
        name = context.get(what, "")
        entry, path = found[section].get(name, ({}, paths[0]))
        out[what] = (name, entry, path)
    return out


def check_user(name: str, user: dict[str, Any], path: Path) -> None:
    """Refuse an exec credential plugin: the operator does not run them (module docstring)."""
    if user.get("exec"):
        command = (user["exec"] or {}).get("command", "?")
        raise LoginRefused(
            f"the kubeconfig user {name!r} ({path}) gets its credentials from an exec plugin "
            f"(users[].user.exec, command {command!r}), which the operator does not run. Run "
            "the operator in the cluster (its service account), or give it a kubeconfig whose "
            "user has a token or a client certificate and key")


def relative_paths_resolved(info: kopf.ConnectionInfo,
                            current: dict[str, tuple[str, dict[str, Any], Path]]) -> kopf.ConnectionInfo:
    """File paths in a kubeconfig are relative to that file (kubectl's rule; Kopf keeps
    them as written, relative to the working directory)."""
    def resolved(value: object, where: str) -> str | None:
        """A relative path made absolute against the file that has `where`; None: as it is."""
        if isinstance(value, str) and value and not os.path.isabs(value):
            return str(current[where][2].parent / value)
        return None

    ca, cert, key = (resolved(info.ca_path, "cluster"), resolved(info.certificate_path, "user"),
                     resolved(info.private_key_path, "user"))
    if ca is None and cert is None and key is None:
        return info
    return dataclasses.replace(info, ca_path=ca or info.ca_path, certificate_path=cert or info.certificate_path,
                               private_key_path=key or info.private_key_path)
