"""The driver's liveness: the heartbeat and what /healthz answers."""

from __future__ import annotations

from wsgiref.util import setup_testing_defaults

from antidote_consumer.driver.liveness import STALL_AFTER_MIN_S, Liveness, stall_after
from antidote_consumer.driver.metrics import Metrics


def test_stall_after_is_ten_attempt_limits_and_at_least_ten_minutes() -> None:
    assert stall_after(1) == STALL_AFTER_MIN_S == 600
    assert stall_after(300) == 3000


def test_liveness_is_healthy_while_starting_and_until_the_beat_is_too_old() -> None:
    now = [100.0]
    live = Liveness(60, clock=lambda: now[0])
    assert live.check() == (True, "starting")
    live.beat()
    now[0] += 59
    assert live.check()[0]
    now[0] += 2
    ok, text = live.check()
    assert not ok and text.startswith("stalled: no progress for 61s (limit 60s")
    live.beat()
    assert live.check()[0]


def _get(app, path: str) -> tuple[str, bytes]:
    env: dict = {"PATH_INFO": path}
    setup_testing_defaults(env)
    seen = {}
    body = b"".join(app(env, lambda status, _headers: seen.setdefault("status", status)))
    return seen["status"], body


def test_healthz_and_metrics_are_served_by_one_app() -> None:
    m = Metrics("shop", "orders")
    now = [0.0]
    m.liveness = Liveness(10, clock=lambda: now[0])
    app = m.app()
    m.beat()
    assert _get(app, "/healthz")[0] == "200 OK"
    status, body = _get(app, "/metrics")
    assert status.startswith("200") and b'antidote_heartbeat_timestamp_seconds{consumer="orders"' in body
    now[0] = 11
    status, body = _get(app, "/healthz")
    assert status == "503 Service Unavailable" and body.startswith(b"stalled")
