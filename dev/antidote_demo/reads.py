"""What the demo reads of its QueueConsumer through the API server: status, conditions, the
Deployment's replicas, Events, the reader Job entry."""

from __future__ import annotations

from typing import Any

from antidote_api.types import GROUP, QUEUE_CONSUMERS, VERSION


class ClusterReads:
    """Mixed into the Demo, which sets `api`, `core`, `objs`, `ns` and `consumer`."""

    api: Any
    core: Any
    objs: Any
    ns: str
    consumer: str

    def _qc(self) -> dict[str, Any]:
        return self.objs.get_namespaced_custom_object(GROUP, VERSION, self.ns, QUEUE_CONSUMERS, self.consumer)

    def _counts(self, qc: dict[str, Any] | None = None) -> dict[str, int]:
        return dict(((qc or self._qc()).get("status") or {}).get("counts") or {})

    def _condition(self, type_: str, qc: dict[str, Any] | None = None) -> tuple[str, str] | None:
        for c in ((qc or self._qc()).get("status") or {}).get("conditions") or []:
            if c["type"] == type_:
                return c["status"], c["reason"]
        return None

    def _replicas(self) -> int | None:
        from kubernetes import client

        try:
            return client.AppsV1Api(self.api).read_namespaced_deployment(self.consumer, self.ns).spec.replicas
        except client.ApiException:
            return None

    def _events(self) -> list[Any]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={self.consumer}").items
        return sorted(evs, key=lambda e: e.event_time or e.metadata.creation_timestamp)

    def _reader_job(self) -> dict[str, Any] | None:
        jobs = (self._qc().get("status") or {}).get("readerJobs") or []
        return jobs[0] if jobs else None
