"""Pure pieces of the local stack: pid-file supervision, PKI, configs, cache keys."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from antidote_devstack import build, controlplane, kafka, stack
from antidote_devstack.certs import ensure_pki
from antidote_devstack.errors import StackError
from antidote_devstack.procs import Supervisor, _start_time


def _sleeper(sup: Supervisor, name: str) -> int:
    return sup.start(name, [sys.executable, "-c", "import time; time.sleep(60)"])


def test_supervisor_stops_by_pid_file(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    pid = _sleeper(sup, "a")
    assert sup.alive("a") and sup.names() == ["a"]
    # A second Supervisor (a later command, or a test session after a crash) finds it.
    later = Supervisor(tmp_path)
    assert later.stop_all() == ["a"]
    assert _start_time(pid) is None
    assert later.names() == []


def test_kill_crashes_a_process_and_its_recorded_command_starts_it_again(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    # It would ignore SIGTERM: only a SIGKILL ends it at once.
    cmd = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]
    pid = sup.start("p", cmd)
    try:
        assert sup.command("p") == cmd
        assert sup.kill("p", timeout=5) is True
        assert _start_time(pid) is None and not sup.alive("p")
        assert sup.command("p") == cmd  # the pid file stays for the restart
        assert sup.kill("p") is False  # nothing running
        again = sup.start("p", sup.command("p"))
        assert again != pid and sup.alive("p")
    finally:
        sup.stop_all()


def test_restart_refuses_etcd_and_a_stack_that_is_not_running(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="only kube-apiserver, kafka"):
        stack.restart(tmp_path, "etcd")
    with pytest.raises(StackError, match="no running kafka"):
        stack.restart(tmp_path, "kafka")


def test_supervisor_never_kills_a_reused_pid(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sup = Supervisor(tmp_path)
        sup.pid_dir.mkdir(parents=True)
        # A stale pid file whose pid now belongs to another process (different start time).
        (sup.pid_dir / "old.pid").write_text(json.dumps({"pid": stranger.pid, "start": "1", "cmd": []}))
        assert not sup.alive("old")
        assert sup.stop("old") is False
        assert stranger.poll() is None
        assert not (sup.pid_dir / "old.pid").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_wait_for_reports_a_dead_process_with_its_log(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    sup.start("boom", [sys.executable, "-c", "print('port 1234 already in use'); raise SystemExit(3)"])
    with pytest.raises(StackError) as err:
        sup.wait_for("boom", "start boom", lambda: False, timeout=30)
    assert err.value.step == "start boom"
    assert "boom exited" in err.value.cause and "already in use" in err.value.cause


def test_wait_for_times_out_naming_the_step(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path)
    _sleeper(sup, "slow")
    try:
        started = time.monotonic()
        with pytest.raises(StackError, match=r"^start slow: slow not ready after 1s"):
            sup.wait_for("slow", "start slow", lambda: False, timeout=1)
        assert time.monotonic() - started < 10
    finally:
        sup.stop_all()


def test_pki_chains_to_its_ca_and_is_reused(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    server = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin_cert.read_bytes())
    server.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    before = pki.ca_cert.read_bytes()
    assert ensure_pki(tmp_path).ca_cert.read_bytes() == before


def test_apiserver_flags_enable_rbac_and_skip_sa_admission(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    cmd = controlplane.apiserver_command(Path("/bin/kube-apiserver"), pki, 2379, 6443)
    assert "--authorization-mode=RBAC" in cmd
    assert "--disable-admission-plugins=ServiceAccount" in cmd
    assert "--etcd-servers=http://127.0.0.1:2379" in cmd and "--secure-port=6443" in cmd


def test_kafka_properties_single_node_kraft(tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in
                 kafka.server_properties(tmp_path, 9092, 9093).splitlines() if line)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["auto.create.topics.enable"] == "false"


def test_kafka_sasl_listener_beside_plaintext(tmp_path: Path) -> None:
    props = dict(line.split("=", 1) for line in
                 kafka.server_properties(tmp_path, 9092, 9093, sasl_port=9094).splitlines() if line)
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] == "PLAIN"
    assert (f'user_{kafka.SASL_USER}="{kafka.SASL_PASSWORD}";'
            in props["listener.name.sasl_plaintext.plain.sasl.jaas.config"])


def test_go_cache_key_follows_go_sum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = tmp_path / "etcd"
    mod.mkdir()
    (mod / "go.mod").write_text("module x\n")
    (mod / "go.sum").write_text("a\n")
    monkeypatch.setattr(build, "HACK", tmp_path)
    monkeypatch.setenv("ANTIDOTE_CACHE", str(tmp_path / "cache"))
    first = build.go_binary_path("etcd")
    assert build.go_binary_path("etcd") == first
    (mod / "go.sum").write_text("b\n")
    assert build.go_binary_path("etcd") != first


def test_every_staging_module_is_replaced_at_the_kubernetes_version() -> None:
    gomod = (build.HACK / "k8s" / "go.mod").read_text()
    v0 = "v0." + build.KUBE_VERSION.split(".", 1)[1]
    assert f"k8s.io/kubernetes {build.KUBE_VERSION}" in gomod
    replaces = [line.split() for line in gomod.splitlines() if "=>" in line]
    assert len(replaces) >= 29
    assert all(r[2] == r[0] and r[3] == v0 for r in replaces), replaces


def test_env_script_quotes_values() -> None:
    s = stack.Stack(dir="/tmp/it's", kubeconfig="/k", apiserver_port=1, etcd_port=2,
                    kafka_bootstrap="127.0.0.1:3", spark_jars=["/a.jar", "/b.jar"], bin_dir="/bin")
    script = stack.env_script(s)
    assert "export KUBECONFIG='/k'\n" in script
    assert "export ANTIDOTE_STACK_DIR='/tmp/it'\\''s'\n" in script
    assert "export ANTIDOTE_SPARK_JARS='/a.jar,/b.jar'\n" in script
    out = subprocess.run(["bash", "-c", script + 'printf %s "$ANTIDOTE_STACK_DIR"'],
                         capture_output=True, text=True, check=True).stdout
    assert out == "/tmp/it's"


@pytest.mark.parametrize("argv", [["dev", "--dir", "/x", "status"], ["dev", "status", "--dir", "/x"]])
def test_dev_dir_is_accepted_before_or_after_the_action(argv: list[str]) -> None:
    from antidote_cli.main import build_parser

    from antidote_cli.dev import _dir

    assert _dir(build_parser().parse_args(argv)) == Path("/x")


def test_dev_dir_defaults_to_none() -> None:
    from antidote_cli.dev import _dir
    from antidote_cli.main import build_parser

    assert _dir(build_parser().parse_args(["dev", "status"])) is None


def _fake_builds(monkeypatch: pytest.MonkeyPatch, go, jars) -> None:
    monkeypatch.setattr(build, "build_go", go)
    monkeypatch.setattr(build, "build_jars", jars)
    monkeypatch.setattr(build, "say", lambda _m: None)


def test_build_runs_the_go_lane_and_the_fetch_lane_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each lane's first artefact waits for the other's: one after the other, the barrier
    # times out and raises BrokenBarrierError.
    meet = threading.Barrier(2, timeout=10)

    def go(name: str) -> Path:
        if name == build.DEFAULT_BINARIES[0]:
            meet.wait()
        return Path("/bin") / name

    def jars(name: str) -> Path:
        if name == build.DEFAULT_JAR_SETS[0]:
            meet.wait()
        return Path("/jars") / name

    _fake_builds(monkeypatch, go, jars)
    paths = build.build_all()
    assert paths == {**{n: Path("/bin") / n for n in build.DEFAULT_BINARIES},
                     **{f"{n}-jars": Path("/jars") / n for n in build.DEFAULT_JAR_SETS}}


def test_a_failed_lane_stops_the_other_before_its_next_artefact(monkeypatch: pytest.MonkeyPatch) -> None:
    jars_failed = threading.Event()
    built: list[str] = []

    def go(name: str) -> Path:
        # The first Go build outlasts the failing fetch; none after it starts.
        if name == build.DEFAULT_BINARIES[0]:
            assert jars_failed.wait(10)
        built.append(name)
        return Path("/bin") / name

    def jars(name: str) -> Path:
        try:
            raise StackError(f"fetch {name} jars", "exit 1 (is the package registry reachable?)")
        finally:
            jars_failed.set()

    _fake_builds(monkeypatch, go, jars)
    with pytest.raises(StackError, match="fetch kafka jars"):
        build.build_all()
    assert built == [build.DEFAULT_BINARIES[0]]
