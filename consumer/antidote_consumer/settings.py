"""Loading the effective settings: the operator's ConfigMap file, or the manifests users apply."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
import yaml

from antidote_api.base import explain
from antidote_api.consumer import QueueConsumer
from antidote_api.policy import PoisonPolicy
from antidote_api.semantics import EffectiveSettings, resolve


class SettingsError(ValueError):
    pass


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line (the CLI's errors and the pod's termination message are one
    line): what is wrong and where, without the quoted source lines PyYAML adds."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        text = "; ".join(filter(None, (err.context, err.problem))) or type(err).__name__
        return " ".join(text.split()) + where
    return " ".join(str(err).split())


def _docs(path: Path, what: str) -> list[dict]:
    """The YAML documents of `path` (one, or several separated by `---`)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as err:
        raise SettingsError(f"{what} {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise SettingsError(f"{what} {path}: not YAML/JSON: {yaml_problem(err)}") from err
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise SettingsError(f"{what} {path}: expected a mapping")
    return docs


def _read(path: Path, what: str) -> dict:
    docs = _docs(path, what)
    if len(docs) > 1:
        raise SettingsError(f"{what} {path}: expected one YAML document, found {len(docs)}")
    return docs[0]


def _name(doc: dict) -> str | None:
    meta = doc.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


def _pick(docs: list[dict], kind: str, path: Path, name: str | None = None) -> dict:
    """The `kind` document of a manifest file: its only document (a `kind` left out is
    taken as asked), else the one of that kind (named `name` when several are)."""
    if len(docs) == 1 and docs[0].get("kind") in (None, kind):
        return docs[0]
    found = [d for d in docs if d.get("kind") == kind]
    if name is not None and len(found) > 1:
        found = [d for d in found if _name(d) == name] or found
    if not found:
        kinds = ", ".join(str(d.get("kind")) for d in docs)
        raise SettingsError(f"{path} has no {kind} (its documents: {kinds})")
    if len(found) > 1:
        raise SettingsError(f"{path} has {len(found)} {kind}s "
                            f"({', '.join(repr(_name(d)) for d in found)}); give one per file")
    return found[0]


def _invalid(what: str, path: Path, err: ValidationError) -> SettingsError:
    return SettingsError(f"{what} {path} is invalid:\n  " + "\n  ".join(explain(err)))


def load_settings(path: Path) -> EffectiveSettings:
    try:
        return EffectiveSettings.model_validate(_read(path, "settings"))
    except ValidationError as err:
        raise _invalid("settings", path, err) from err


def from_manifests(consumer_path: Path, policy_path: Path | None = None) -> EffectiveSettings:
    """The settings of a QueueConsumer manifest and its PoisonPolicy's: in `policy_path`, or
    beside it in `consumer_path` (a multi-document `qc+pp.yaml`, as `kubectl apply -f` takes)."""
    docs = _docs(consumer_path, "QueueConsumer")
    try:
        qc = QueueConsumer.model_validate(_pick(docs, "QueueConsumer", consumer_path))
    except ValidationError as err:
        raise _invalid("QueueConsumer", consumer_path, err) from err
    meta = qc.metadata or {}
    ref = qc.spec.policy_ref.name
    if policy_path is None:
        if not any(d.get("kind") == "PoisonPolicy" for d in docs):
            raise SettingsError(f"QueueConsumer {meta.get('name')} refers to PoisonPolicy {ref!r}: give "
                                f"it with --policy FILE, or as a second document of {consumer_path}")
        policy_path, policy_docs = consumer_path, docs
    else:
        policy_docs = _docs(policy_path, "PoisonPolicy")
    try:
        pp = PoisonPolicy.model_validate(_pick(policy_docs, "PoisonPolicy", policy_path, name=ref))
    except ValidationError as err:
        raise _invalid("PoisonPolicy", policy_path, err) from err
    if (pp.metadata or {}).get("name") != ref:
        raise SettingsError(f"QueueConsumer {meta.get('name')} refers to PoisonPolicy "
                            f"{ref!r}, but {policy_path} is "
                            f"{(pp.metadata or {}).get('name')!r}")
    try:
        return resolve(qc.spec, pp.spec, name=meta.get("name", ""),
                       namespace=meta.get("namespace", "default"))
    except ValueError as err:  # the pair does not fit (a route's topic is the source, say): one line
        raise SettingsError(f"QueueConsumer {meta.get('name')} cannot run under PoisonPolicy "
                            f"{ref!r}: {err}") from None
