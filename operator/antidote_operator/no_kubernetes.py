"""Keep the `kubernetes` package out of the operator's process.

Kopf imports it when it is installed (`kopf/_cogs/helpers/thirdparty.py`, for its model
classes, and `kopf/_core/intents/piggybacking.py`, to choose a login): ~38 MB of generated
models that the operator never uses (its client is `kube.Kube`, its login `kube_login`).
The package stays a dependency of the CLI, the demo and the tests, so it is installed;
this makes `import kubernetes` fail in the operator's process instead, which both of Kopf's
places expect (`except ImportError`). Call it before anything imports Kopf.
"""

from __future__ import annotations

import sys

KEPT_OUT = ("kubernetes", "kubernetes_asyncio")


def keep_out() -> bool:
    """True when none of them was imported before (else there is nothing left to save)."""
    if any(name in sys.modules for name in KEPT_OUT):
        return False
    for name in KEPT_OUT:
        # None in sys.modules makes `import` raise ImportError (the import system's own rule),
        # which typeshed's dict[str, ModuleType] does not spell.
        sys.modules[name] = None  # type: ignore[assignment]
    return True
