"""The steady-state benchmark's CPU accounting (benchmarks/steady_state.py:MachineCpu): a
window's CPU read between samples, whole and by kind of process. Pure arithmetic on
synthetic samples; the sampler itself reads /proc."""

import os
from pathlib import Path

import pytest

from benchmarks.steady_state import MachineCpu


@pytest.fixture
def cpu():
    m = MachineCpu()
    m.close()  # the samples below are the test's own
    m.hz = 100
    return m


def kinds(**ticks):
    return {**dict.fromkeys(MachineCpu.KINDS, 0), **ticks}


def test_a_window_between_samples_is_interpolated_whole_and_by_kind(cpu):
    cpu.samples = [(10.0, 1000, kinds(**{"py workers": 500, "driver": 100})),
                   (11.0, 1200, kinds(**{"py workers": 700, "driver": 120}))]
    whole, by = cpu.between(10.5, 11.0)
    assert whole == pytest.approx(1.0)  # 100 of the 200 ticks, at 100 a second
    assert by["py workers"] == pytest.approx(1.0)
    assert by["driver"] == pytest.approx(0.1)
    assert by["other"] == 0.0  # never below zero: what is not a process's is the kernel's


def test_what_no_process_accounts_for_is_other(cpu):
    cpu.samples = [(0.0, 0, kinds(broker=10)), (2.0, 400, kinds(broker=110))]
    whole, by = cpu.between(0.0, 2.0)
    assert whole == pytest.approx(4.0)
    assert by["broker"] == pytest.approx(1.0)
    assert by["other"] == pytest.approx(3.0)


def test_a_window_past_the_samples_stops_at_the_last(cpu):
    cpu.samples = [(0.0, 0, kinds()), (1.0, 100, kinds(driver=100))]
    assert cpu.between(0.5, 5.0)[0] == pytest.approx(0.5)


@pytest.mark.parametrize("cmdline, kind", [
    ("java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell", "spark jvm"),
    (".venv/bin/python -m pyspark.daemon pyspark.worker", "py workers"),
    ("python -c from multiprocessing.spawn import spawn_main; spawn_main()", "subprocs"),
    ("java -Xmx512m -cp kafka/* kafka.Kafka server.properties", "broker"),
    ("kube-apiserver --etcd-servers=x", "other"),
    ("python -c import json --antidote-core-probe", "probe"),
])
def test_processes_are_told_apart_by_their_command_line(cmdline, kind):
    assert MachineCpu.kind_of(1, cmdline) == kind


def test_this_process_is_the_driver():
    assert MachineCpu.kind_of(os.getpid(), "python benchmarks/steady_state.py") == "driver"


def test_the_core_probe_gives_the_median_of_its_samples_in_the_window():
    from benchmarks.steady_state import CoreProbe

    probe = CoreProbe(launch=False)
    probe.samples = [(0.5, 9.0), (1.0, 5.0), (2.0, 7.0), (3.0, 6.0), (4.5, 20.0)]
    assert probe.between(1.0, 3.0) == 6.0
    assert probe.between(10.0, 20.0) is None  # no sample inside: nothing said


def test_the_core_probe_measures_real_work():
    """The probe's own process, started for real: samples arrive, in microseconds of CPU per
    JSON round trip (a few on any machine; never zero, never a second)."""
    import time

    from benchmarks.steady_state import CoreProbe

    probe = CoreProbe()
    try:
        deadline = time.monotonic() + 30
        while not probe.samples and time.monotonic() < deadline:
            time.sleep(0.05)
        assert probe.samples, "the probe gave no sample in 30 s"
        t, us = probe.samples[0]
        assert abs(t - time.time()) < 60 and 0.1 < us < 1000
        assert MachineCpu.kind_of(probe._proc.pid, " ".join(
            Path(f"/proc/{probe._proc.pid}/cmdline").read_bytes().decode().split("\0"))) == "probe"
    finally:
        probe.close()
