"""What an on-call command that edits a consumer's ledger (`antidote skip`, `antidote rebase`)
does around its Kafka work: the credentials checked, the broker reached, and every failure
that is not a bug said in one line, naming the broker and whether anything changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaException

from antidote_api.semantics import EffectiveSettings
from antidote_consumer.kafka import auth as kafka_auth
from antidote_consumer.kafka.topics import KafkaUnreachable, reachable

T = TypeVar("T")


def ledger_edit(s: EffectiveSettings, conf: dict | None, error: type[Exception], what: str,
                work: Callable[[str, dict], T]) -> T:
    """`work(bootstrap, conf)`, with `conf` the source's verified client settings when None;
    raises `error`, one line, for credentials that cannot be used, Kafka unreachable or
    refusing a call ("the <what> was not recorded")."""
    bootstrap = s.source.bootstrap_servers
    try:
        if conf is None:
            conf = kafka_auth.source_config(s, verify=True)
        reachable(conf, bootstrap, timeout=15)
        return work(bootstrap, conf)
    except (kafka_auth.KafkaAuthError, KafkaUnreachable) as err:
        raise error(f"{err}; nothing was changed") from None
    except KafkaException as err:
        kerr = err.args[0] if err.args else None
        said = kerr.str() if kerr is not None and hasattr(kerr, "str") else err
        raise error(f"Kafka at {bootstrap}: {said}; "
                    f"the {what} was not recorded") from None
    except (RuntimeError, TimeoutError) as err:  # kafka_retry and the ledger's reads say what failed
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise error(f"Kafka at {bootstrap}: {first}; the {what} was not recorded") from None
