"""Executors scaled by source lag (`spec.spark.autoscale`), and what the operator reports of
it (`status.executors`): the models, and the reasons, one list for the decision, the status
and the Events (docs/operator.md, "Executors scaled by lag")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from .base import ApiModel, Rule
from .duration import Duration
from .types import Int64

# Why the executor count is what it is (status.executors.reason). The two that change it are
# also the reasons of the Normal Events posted when it changes.
SCALED_UP = "ScaledUp"
SCALED_DOWN = "ScaledDown"
STEADY = "Steady"  # the lag that can use executors fits the current count
UP_COOLING = "ScaleUpCoolingDown"  # more wanted, within scaleUpCooldown of the last change
DOWN_COOLING = "ScaleDownCoolingDown"  # fewer wanted, within scaleDownCooldown of the last change
BLOCKED = "LagBlocked"  # all the lag sits behind blocked partitions: more executors cannot help
NO_LAG_YET = "NoLagReading"  # the consumer has not reported its source partitions yet
NOT_RUNNING = "NotRunning"  # paused or disabled: the count is kept for the next start
REASONS = (SCALED_UP, SCALED_DOWN, STEADY, UP_COOLING, DOWN_COOLING, BLOCKED, NO_LAG_YET, NOT_RUNNING)
EVENT_REASONS = (SCALED_UP, SCALED_DOWN)


class Autoscale(ApiModel):
    min: int = Field(1, ge=1, le=1000, description="Fewest executors; also the count it starts with.")
    max: int = Field(ge=1, le=1000, description="Most executors.")
    target_lag_per_executor: Int64 = Field(
        10_000, ge=1,
        description="Source records waiting (lag) that one executor is expected to work off: "
                    "the count wanted is the lag that can use executors divided by this, rounded "
                    "up. Lag in partitions that are blocked (see docs/operator.md) is left out.")
    scale_up_cooldown: Duration = Field(
        Duration.parse("2m"),
        description="No scale-up within this time of the last change. Every change restarts the "
                    "driver (the new count is in its Spark configuration), so this bounds restarts.")
    scale_down_cooldown: Duration = Field(
        Duration.parse("10m"),
        description="No scale-down within this time of the last change, so a burst that was just "
                    "worked off does not bounce the count.")

    rules = (
        Rule("!has(self.min) || self.min <= self.max", "min must not exceed max",
             lambda s: s.min <= s.max, field="min"),
    )


class ExecutorScale(ApiModel):
    current: int = Field(ge=0, description="Executors in the driver's configuration now.")
    desired: int = Field(ge=0, description="What the lag asks for, within min and max; differs "
                                           "from `current` while a cool-down holds the change.")
    reason: str = Field(max_length=64, description="Why, in one CamelCase word: " + ", ".join(
        f"`{r}`" for r in REASONS) + ".")
    message: str = Field("", max_length=1024, description="The reason in words.")
    last_scale_time: datetime | None = Field(None, description="When the count last changed.")


# Spark keys that would override or fight the operator's count; refused in spec.spark.conf
# together with autoscale (the message names the field).
CONFLICTING_CONF = ("spark.executor.instances", "spark.dynamicAllocation.enabled")
CONFLICT_CEL = ("!has(self.autoscale) || !has(self.conf) || !self.conf.exists(k, k in ["
                + ", ".join(f"'{k}'" for k in CONFLICTING_CONF) + "])")
CONFLICT_MESSAGE = ("with autoscale the operator sets the executor count: conf may not set "
                    + " or ".join(CONFLICTING_CONF))


def conflicts(spark: Any) -> bool:  # a consumer.Spark (that module imports this one)
    return spark.autoscale is not None and any(k in (spark.conf or {}) for k in CONFLICTING_CONF)
