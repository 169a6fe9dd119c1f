"""The one place where something other than a kubelet may run a consumer's children.

On a cluster, kubelets run the driver Deployments and reader Jobs the operator creates, and
the operator learns how they ended from Kubernetes (pod statuses, termination messages). On
an API server with no kubelet (the local stack), a `ChildRunner` plays that part: the
operator shows it every consumer-owned Deployment and Job it sees and reads back what a
kubelet would have reported. The dev runner (dev/antidote_devrunner) is the only one; the
CLI passes its factory to `main.operate` when `antidote operator --dev-runner` is given, so
the production operator never imports it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .context import Options
    from .kube import Kube
    from .observations import Termination


class ChildRunner(Protocol):
    def observe(self, body: Mapping[str, Any], deleted: bool) -> None:
        """A consumer's driver Deployment, as the watch saw it."""

    def observe_job(self, body: Mapping[str, Any], deleted: bool) -> None:
        """A consumer's reader Job, as the watch saw it."""

    def started(self, metrics_port: int | None) -> None:
        """The operator's handlers run (and serve their metrics on `metrics_port`)."""

    async def close(self) -> None:
        """The operator stops: so do the children it runs."""

    def metrics_url(self, annotations: Mapping[str, str]) -> str | None:
        """Where a Deployment's running driver serves /metrics, if it runs here."""

    def termination(self, annotations: Mapping[str, str]) -> Termination | None:
        """A Deployment's driver's last exit, as a pod's terminated state would say."""

    def job_report(self, annotations: Mapping[str, str]) -> str | None:
        """A reader Job's report, as its pod's termination message would hold it."""


class ChildRunnerRefused(RuntimeError):
    """The runner may not run here (the factory says why): the operator exits 2."""


# Made once the API client exists, before Kopf starts; may raise ChildRunnerRefused.
RunnerFactory = Callable[["Kube", "Options"], Awaitable[ChildRunner]]
