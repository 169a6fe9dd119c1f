"""Whether an object of a child's name is the consumer's own: the one rule before any write.

The operator makes its children by name (`<consumer>`, `<consumer>-driver`...), and a name
alone proves nothing: a team's Deployment `web`, or a privileged ServiceAccount `x-driver`,
can be there first. The operator changes (patches, deletes, scales, adopts) an object only
when it carries an ownerReference to the very QueueConsumer (its uid: a consumer deleted and
created again under the same name is another owner). Anything else is a conflict: nothing of
it is written, and the consumer reports it (Ready=False, reason ChildConflict).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from antidote_api.types import GROUP

OWNER_KIND = "QueueConsumer"


def owner_uids(obj: Mapping[str, Any]) -> set[str]:
    return {str(o["uid"]) for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("uid")}


def owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """`obj` carries an ownerReference to the owner of `uid` (no uid: owned by nobody)."""
    return bool(uid) and uid in owner_uids(obj)


def owned_by_a_consumer(obj: Mapping[str, Any]) -> bool:
    """`obj` belongs to some QueueConsumer: what the dev runner (playing kubelet for the
    operator's children only) runs."""
    return any(o.get("kind") == OWNER_KIND and str(o.get("apiVersion", "")).startswith(f"{GROUP}/")
               for o in (obj.get("metadata") or {}).get("ownerReferences") or [])


def desired_owner(desired: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ownerReference a child is built with (kopf.adopt): the owner it must already have.
    A child without one cannot be checked, so it is a programming error, not a guess."""
    refs = (desired.get("metadata") or {}).get("ownerReferences") or []
    if not refs or not refs[0].get("uid"):
        raise ValueError(f"{desired.get('kind')} {desired['metadata'].get('name')} has no owner "
                         "to check an existing object against")
    return refs[0]


def conflict_message(kind: str, name: str, owner: Mapping[str, Any]) -> str:
    """Ready's message (and the Warning Event's) for an object the consumer may not touch."""
    return (f"{kind} {name} exists and is not owned by {owner.get('kind', OWNER_KIND)} "
            f"{owner.get('name')}: it is left unchanged, and what needs it waits until it is gone.")


def conflict_of(desired: Mapping[str, Any], have: Mapping[str, Any] | None) -> str | None:
    """None when `desired` may be written over `have` (absent, or the same owner's); else the
    conflict's message."""
    owner = desired_owner(desired)
    if have is None or owned_by(have, str(owner["uid"])):
        return None
    return conflict_message(desired["kind"], desired["metadata"]["name"], owner)
