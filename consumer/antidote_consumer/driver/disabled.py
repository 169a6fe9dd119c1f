"""The consumer's way of stopping when its queue must be disabled: an exception carrying
the disable reason (one of `DisableReason`, whose exit code wire.DISABLE_EXIT gives) and
the message the operator turns into the condition's text. Its own module so that every
part of the driver that can disable the queue (settling, refused settles, batch failures)
imports it from here, and none of them from another."""

from __future__ import annotations

from antidote_api.conditions import DisableReason
from antidote_api.wire import DISABLE_EXIT, ExitCode


class QueueDisabled(Exception):
    """The consumer must stop: its queue is disabled for `reason`."""

    codes = DISABLE_EXIT

    def __init__(self, reason: DisableReason, message: str, at: dict | None = None):
        super().__init__(f"{reason}: {message}")
        self.reason, self.message = DisableReason(reason), message
        self.at = at  # Fault: the poison record (as read) and why, for `antidote skip`

    @property
    def exit_code(self) -> ExitCode:
        return self.codes[self.reason]
