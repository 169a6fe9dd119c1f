"""The cluster as the on-call commands read it (like kubectl: --kubeconfig, --context, -n):
the QueueConsumer, its settings ConfigMap, patches; and the one-line error they all raise."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from antidote_api.names import settings_configmap
from antidote_api.types import GROUP, QUEUE_CONSUMERS, VERSION
from antidote_api.wire import SETTINGS_KEY

from ..errors import CliError  # noqa: F401 (the on-call modules' one error, re-exported)


PLURAL = QUEUE_CONSUMERS


def settings_file(path):
    """A local consumer's effective settings file (`--settings`, instead of the cluster's
    ConfigMap), or CliError naming what is wrong with it: exit 2, as every command that
    refuses its settings file or manifest (ExitCode.BAD_SETTINGS, docs/cli.md)."""
    from antidote_api.wire import ExitCode
    from antidote_consumer.settings import SettingsError, load_settings

    try:
        return load_settings(path)
    except SettingsError as err:
        raise CliError(str(err), ExitCode.BAD_SETTINGS) from None


def local_settings(args: argparse.Namespace, name: str | None, load: Any = None) -> Any:
    """A local consumer's settings (`--settings FILE`, `-f MANIFEST`) instead of the
    cluster's: flags that choose a cluster's consumer are refused (exit 2) rather than
    ignored, unless they agree with the file (its name, its namespace)."""
    from ..errors import usage_error

    if getattr(args, "kubeconfig", None) or getattr(args, "context", None):
        raise usage_error("--kubeconfig and --context are for a consumer in the cluster (CONSUMER); "
                          "--settings and -f need no cluster")
    s = load(args) if load is not None else settings_file(args.settings)
    if name is not None and name != s.consumer:
        raise usage_error(f"consumer {name!r}: these settings are consumer {s.namespace}/{s.consumer}'s")
    if getattr(args, "namespace", None) and args.namespace != s.namespace:
        raise usage_error(f"-n {args.namespace}: these settings are consumer {s.namespace}/{s.consumer}'s; "
                          "-n chooses a consumer in the cluster (with CONSUMER)")
    return s


def parse_settings(cm_name: str, text: str | None) -> Any:
    """The effective settings in ConfigMap `cm_name`, or CliError in one line: an operator of
    another version may write fields this CLI does not know (the models refuse extra
    fields), which is said as such rather than as pydantic's traceback."""
    import yaml
    from pydantic import ValidationError

    from antidote_api.base import explain
    from antidote_api.semantics import EffectiveSettings

    if not text:
        raise CliError(f'ConfigMap "{cm_name}" has no {SETTINGS_KEY}')
    try:
        return EffectiveSettings.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as err:
        from antidote_consumer.settings import yaml_problem

        raise CliError(f'ConfigMap "{cm_name}": {SETTINGS_KEY} is not YAML: {yaml_problem(err)}') from None
    except ValidationError as err:
        from ..version import version

        raise CliError(f'ConfigMap "{cm_name}": settings this antidote ({version()}) cannot read: '
                       f"{'; '.join(explain(err))}; is the operator another version? compare "
                       "`antidote --version` with its image's tag") from None


class Cluster:
    def __init__(self, args: argparse.Namespace):
        from kubernetes import client, config

        try:
            contexts, active = config.list_kube_config_contexts(config_file=args.kubeconfig)
            ctx = next((c for c in contexts if c["name"] == args.context), None) if args.context else active
            if args.context and ctx is None:
                raise CliError(f'context "{args.context}" is not in the kubeconfig')
            cfg = client.Configuration()
            config.load_kube_config(config_file=args.kubeconfig, context=args.context,
                                    client_configuration=cfg)
        except config.ConfigException as err:
            raise CliError(f"cannot load the kubeconfig: {err}") from None
        cfg.retries = 1  # an unreachable cluster answers in seconds, not minutes
        self.host = cfg.host
        self.namespace = args.namespace or (ctx or {}).get("context", {}).get("namespace") or "default"
        self.api = client.ApiClient(cfg)
        self.objs = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    def call(self, fn: Any, *a: Any, missing: str | None = None, **kw: Any) -> Any:
        """One API call with errors in words; `missing` is the message for a 404."""
        import urllib3
        from kubernetes.client.rest import ApiException

        try:
            return fn(*a, _request_timeout=(5, 30), **kw)
        except ApiException as err:
            if err.status == 404 and missing is not None:
                raise CliError(missing) from None
            try:
                why = json.loads(err.body).get("message", err.reason) if err.body else err.reason
            except (TypeError, ValueError):
                why = err.reason
            raise CliError(f"the API server at {self.host} answered {err.status}: {why}") from None
        except (urllib3.exceptions.HTTPError, OSError) as err:
            cause = getattr(err, "reason", None) or err
            text = str(cause).split(": ", 1)[-1] if "Connection refused" not in str(cause) else "connection refused"
            raise CliError(f"cannot reach the Kubernetes API server at {self.host}: {text}") from None

    def consumer(self, name: str) -> dict[str, Any]:
        return self.call(self.objs.get_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, name,
                         missing=f'queueconsumer "{name}" not found in namespace "{self.namespace}"')

    def settings(self, name: str) -> Any:
        cm_name = settings_configmap(name)
        cm = self.call(self.core.read_namespaced_config_map, cm_name, self.namespace,
                       missing=f'ConfigMap "{cm_name}" not found in namespace "{self.namespace}": '
                               "the operator writes it; is it running, and is the consumer valid?")
        return parse_settings(cm_name, (cm.data or {}).get(SETTINGS_KEY))

    def secret_data(self, name: str) -> dict[str, bytes]:
        """Secret `name`'s keys and values (for --decode's registry credentials)."""
        import base64

        secret = self.call(self.core.read_namespaced_secret, name, self.namespace,
                           missing=f'Secret "{name}" not found in namespace "{self.namespace}"')
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def patch_consumer(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.call(self.objs.patch_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                         name, dict(body), missing=f'queueconsumer "{name}" not found in namespace '
                                                   f'"{self.namespace}"')
