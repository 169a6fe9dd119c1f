"""The demo's one error."""


class DemoError(RuntimeError):
    """A step did not happen in time; the message says which and where to look."""
