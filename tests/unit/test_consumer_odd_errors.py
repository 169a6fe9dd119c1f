"""Exceptions that resist being described (their str() or repr() raises, their class's module
is not text, their text is not valid Unicode...) are ordinary failures of their message:
retried and quarantined with exact attempts, never a failed batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from antidote import NonRetryable, Retry
from antidote_consumer.kafka import headers as h
from antidote_consumer.worker.attempts import Plan, class_name, run_pass
from antidote_consumer.worker.verdict import Verdict
from antidote_consumer.worker.executor import INPUT_FIELDS, WorkerConfig, arrow_schema, process
from antidote_consumer.worker.message import Message

MSG = Message(b"k", b"v", (), "orders", 2, 41, 1_700_000_000_000)


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        raise RuntimeError("no repr")


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no str")


class StrNotText(Exception):
    def __str__(self):
        return 42  # str() raises TypeError


class StrSurrogate(Exception):
    def __str__(self):
        return "bad \udc80 bytes"  # not encodable as UTF-8: Arrow and Kafka headers refuse it


class OddModule(Exception):
    pass


OddModule.__module__ = Unprintable()  # neither text nor printable


class NoModule(Exception):
    pass


NoModule.__module__ = None


class SurrogateName(Exception):
    pass


SurrogateName.__qualname__ = "Name\udc80"


class CauseRaises(Exception):
    @property
    def __cause__(self):
        raise RuntimeError("no cause")


class ClassRaises(Exception):
    @property
    def __class__(self):  # isinstance() asks for it
        raise RuntimeError("no class")


class RetryStrRaises(Retry):
    def __str__(self):
        raise RuntimeError("no str")


class NonRetryableStrRaises(NonRetryable):
    def __str__(self):
        raise RuntimeError("no str")


class LyingMeta(type):
    def _no_module(cls):
        raise RuntimeError("no module")

    __module__ = property(_no_module)  # what its classes say their module is


class MetaLies(Exception, metaclass=LyingMeta):
    pass


def with_bad_notes():
    err = ValueError("noted")
    err.__notes__ = [Unprintable()]
    return err


def chained():
    try:
        raise StrRaises()
    except StrRaises:
        try:
            raise ValueError("while handling")
        except ValueError as err:
            return err


ODD = {
    "str raises": (StrRaises, f"<str() of {__name__}.StrRaises failed: RuntimeError>"),
    "str not text": (StrNotText, f"<str() of {__name__}.StrNotText failed: TypeError>"),
    "str with a surrogate": (StrSurrogate, "bad \\udc80 bytes"),
    "module not text": (lambda: OddModule("m"), "m"),
    "module None": (lambda: NoModule("m"), "m"),
    "name with a surrogate": (lambda: SurrogateName("m"), "m"),
    "__cause__ raises": (lambda: CauseRaises("c"), "c"),
    "__class__ raises": (lambda: ClassRaises("c"), "c"),
    "its metaclass's __module__ raises": (lambda: MetaLies("c"), "c"),
    "notes that cannot print": (with_bad_notes, "noted"),
    "chained to a str that raises": (chained, "while handling"),
    "group of odd ones": (lambda: ExceptionGroup("g", [StrRaises(), StrSurrogate()]), "g (2 sub-exceptions)"),
    "Retry(after=) whose repr raises": (
        lambda: Retry(after=Unprintable(), message="m"),
        f"Retry(after=<repr() of {__name__}.Unprintable failed: RuntimeError>) on orders/2/41: "
        "Unprintable is not a delay"),
}


def raising(make):
    def handler(_msg):
        raise make()
    return handler


def encodable(*texts: str | None) -> None:
    pa.array(list(texts), pa.string())  # what the executors send back: fails on a surrogate
    for text in texts:
        if text is not None:
            text.encode("utf-8")


@pytest.mark.parametrize("name", list(ODD))
@pytest.mark.parametrize("cycles", [1, 0])
def test_an_odd_error_is_an_ordinary_failure_with_exact_attempts(name: str, cycles: int) -> None:
    make, says = ODD[name]
    out = run_pass(MSG, raising(make), Plan(immediate=2, cycles=cycles), cycle=0)
    assert (out.verdict, out.attempts) == ((Verdict.RETRY, 3) if cycles else (Verdict.FINAL, 3))
    assert out.error_message.startswith(says)
    assert out.error_class and out.stack
    encodable(out.error_class, out.error_message, out.stack)


def test_the_error_class_names_an_odd_module_as_python_does() -> None:
    assert class_name(MetaLies) == f"{__name__}.MetaLies"  # its own name, past the metaclass

    assert class_name(OddModule) == class_name(NoModule).replace("NoModule", "OddModule") == "<unknown>.OddModule"
    assert class_name(SurrogateName) == f"{__name__}.Name\\udc80"
    assert class_name(ValueError) == "ValueError" and class_name(StrRaises) == f"{__name__}.StrRaises"


def test_a_retry_or_non_retryable_whose_str_raises_still_decides() -> None:
    out = run_pass(MSG, raising(RetryStrRaises), Plan(immediate=2, cycles=1), cycle=0)
    assert (out.verdict, out.attempts, out.chosen) == (Verdict.RETRY, 1, "retry")
    out = run_pass(MSG, raising(RetryStrRaises), Plan(immediate=2, cycles=1), cycle=1)
    assert (out.verdict, out.attempts) == (Verdict.FINAL, 1)
    assert out.error_message == (f"<str() of {__name__}.RetryStrRaises failed: RuntimeError> "
                                 "(no retry cycle left: the policy has 1, all used)")
    out = run_pass(MSG, raising(NonRetryableStrRaises), Plan(immediate=2, cycles=1), cycle=0)
    assert (out.verdict, out.attempts, out.reason.value) == (Verdict.FINAL, 1, "non-retryable")
    assert out.error_message == f"<str() of {__name__}.NonRetryableStrRaises failed: RuntimeError>"


def test_texts_never_raise() -> None:
    from antidote_consumer.worker.describe import error_text, shown, valid_text

    assert error_text(StrRaises()) == f"<str() of {__name__}.StrRaises failed: RuntimeError>"
    assert shown(Unprintable()) == f"<repr() of {__name__}.Unprintable failed: RuntimeError>"
    assert valid_text("ok é") == "ok é" and valid_text("a\udc80b") == "a\\udc80b"

    class Sneaky(str):
        def isascii(self):
            raise RuntimeError("handler code")

    assert type(valid_text(Sneaky("x"))) is str


def odd_handler(msg: Message):
    """Raises the odd error named by the message's value (ODD's keys)."""
    raise ODD[msg.value.decode()][0]()


def test_the_executors_give_odd_errors_their_outcome_in_one_batch() -> None:
    names = list(ODD)
    cfg = WorkerConfig(handler=f"{__name__}:odd_handler", source_topic="src", immediate=1, cycles=1,
                       non_retryable=frozenset({"Nothing"}), validation=None, sink_kafka=None,
                       emit_outputs=True)
    n = len(names)
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"k"] * n, "value": [x.encode() for x in names], "topic": ["src"] * n,
         "partition": [0] * n, "offset": list(range(n)), "ts": [0] * n, "headers": [None] * n},
        schema=arrow_schema(INPUT_FIELDS))
    rows = [r for b in process(cfg, iter([batch])) for r in b.to_pylist()]
    failed = [r for r in rows if r["kind"] == "retry"]
    assert [r["offset"] for r in failed] == list(range(n))  # each its own outcome, in order
    assert {r["attempts"] for r in failed} == {2}
    (summary,) = [r for r in rows if r["kind"] == "summary"]
    assert summary["n_attempts"] == 2 * n
    for r in failed:  # and their headers can be written
        h.failure_headers(origin=h.Origin("src", 0, r["offset"], 0), attempts=2, cycle=1,
                          first_failure=1, last_failure=1, reason=None, error_class=r["error_class"],
                          error_message=r["error_message"], stack=r["stack"], consumer="ns/c",
                          policy="p", due=1)


def test_a_module_that_raises_an_unprintable_error_at_import_is_named_in_one_line(tmp_path, monkeypatch) -> None:
    from antidote_consumer.worker.handler import HandlerLoadError, load_handler

    (tmp_path / "unprintable_at_import.py").write_text(
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HandlerLoadError) as caught:
        load_handler("unprintable_at_import:f")
    assert str(caught.value) == ("handler 'unprintable_at_import:f': importing unprintable_at_import failed: "
                                 "E: <str() of unprintable_at_import.E failed: RuntimeError>")
