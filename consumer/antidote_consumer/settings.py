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


def _read(path: Path, what: str) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SettingsError(f"{what} {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise SettingsError(f"{what} {path}: not YAML/JSON: {err}") from err
    if not isinstance(doc, dict):
        raise SettingsError(f"{what} {path}: expected a mapping")
    return doc


def _invalid(what: str, path: Path, err: ValidationError) -> SettingsError:
    return SettingsError(f"{what} {path} is invalid:\n  " + "\n  ".join(explain(err)))


def load_settings(path: Path) -> EffectiveSettings:
    try:
        return EffectiveSettings.model_validate(_read(path, "settings"))
    except ValidationError as err:
        raise _invalid("settings", path, err) from err


def from_manifests(consumer_path: Path, policy_path: Path) -> EffectiveSettings:
    try:
        qc = QueueConsumer.model_validate(_read(consumer_path, "QueueConsumer"))
    except ValidationError as err:
        raise _invalid("QueueConsumer", consumer_path, err) from err
    try:
        pp = PoisonPolicy.model_validate(_read(policy_path, "PoisonPolicy"))
    except ValidationError as err:
        raise _invalid("PoisonPolicy", policy_path, err) from err
    meta = qc.metadata or {}
    if (pp.metadata or {}).get("name") != qc.spec.policy_ref.name:
        raise SettingsError(f"QueueConsumer {meta.get('name')} refers to PoisonPolicy "
                            f"{qc.spec.policy_ref.name!r}, but {policy_path} is "
                            f"{(pp.metadata or {}).get('name')!r}")
    return resolve(qc.spec, pp.spec, name=meta.get("name", ""),
                   namespace=meta.get("namespace", "default"))
