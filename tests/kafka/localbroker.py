"""A single-node Apache Kafka (KRaft, broker and controller in one JVM) on 127.0.0.1.

Tests, CI, benchmarks and ``scripts/kafka-broker`` need a real broker on a machine that reaches Maven
Central and nothing else. So the broker is fetched as jars: ``scripts/kafka/pom.xml`` names
``org.apache.kafka:kafka_2.13`` and ``mvn dependency:copy-dependencies`` copies it with its runtime
dependencies into ``.cache/kafka/libs`` (git-ignored). A stamp file makes reruns skip Maven entirely
unless the pom changed, so a rerun starts offline in the time the JVM takes.

A run directory holds everything one broker writes: ``server.properties``, ``log4j2.properties``,
``broker.log``, the KRaft data directory, ``pid`` and ``bootstrap`` (``127.0.0.1:PORT``). The broker
is started detached (its own session) so that it outlives the command that started it, and stopped by
the PID recorded there, after checking that the PID is still that broker's JVM.

Sizes: -Xmx512m is plenty for one node of test traffic; ``message.max.bytes`` is 16 MiB so that
fabricwatch can create topics with its own, smaller per-topic limit (fabricwatch.stream.kafka) and the broker
never is the tighter bound.

Usage: ``python -m tests.kafka.localbroker start|stop|status [--run-dir DIR] [--port N]``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "scripts" / "kafka" / "pom.xml"
CACHE = ROOT / ".cache" / "kafka"
LIBS = CACHE / "libs"
RUN_DIR = CACHE / "run"
MAVEN_TIMEOUT_S = 600  # a cold fetch of ~45 MB of jars; reruns skip Maven
READY_TIMEOUT_S = 90.0  # a cold JVM on 2 busy cores takes 5-20 s
STOP_TIMEOUT_S = 30.0
BROKER_MESSAGE_MAX_BYTES = 16 * 1024 * 1024


class BrokerError(RuntimeError):
    """The broker could not be fetched, started or reached; the message says why in one line."""


# --- fetching ---------------------------------------------------------------------------------------


def fetch(libs: Path = LIBS, pom: Path = POM) -> Path:
    """Jars of the broker in ``libs`` (Maven runs only when the pom is newer than the last fetch)."""
    stamp = libs / ".fetched"
    if stamp.exists() and stamp.stat().st_mtime >= pom.stat().st_mtime and any(libs.glob("kafka_2.13-*.jar")):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) is not installed: it fetches the Kafka broker (apt-get install maven)")
    if libs.exists():
        shutil.rmtree(libs)  # a changed pom must not leave jars of an older version on the class path
    libs.mkdir(parents=True)
    argv = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={libs}"]
    argv.append("-DincludeScope=runtime")
    print(f"kafka-broker: fetching Kafka into {libs} with Maven", file=sys.stderr)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise BrokerError(f"Maven did not finish fetching Kafka within {MAVEN_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise BrokerError(f"Maven failed to fetch Kafka (exit {done.returncode}): {tail}")
    stamp.touch()
    return libs


def java() -> str:
    """The java binary: $JAVA_HOME/bin/java, else java on PATH; Kafka 4 needs Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not path or not Path(path).exists():
        raise BrokerError("Java is not installed: Kafka 4 needs Java 17 or newer (apt-get install openjdk-17-jre)")
    return path


# --- one broker --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalBroker:
    """One broker's run directory and ports; :meth:`start` and :meth:`stop` can repeat (same data)."""

    run_dir: Path
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "broker.log"

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> LocalBroker:
        """A new broker in ``run_dir`` (its old data is removed) on ``port`` or a free port."""
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        port = port or free_port()
        controller = free_port()
        while controller == port:
            controller = free_port()
        broker = cls(run_dir, port, controller)
        broker._write_config()
        return broker

    @classmethod
    def existing(cls, run_dir: Path) -> LocalBroker | None:
        """The broker last created in ``run_dir``, or None."""
        try:
            port, controller = (int(x) for x in (run_dir / "ports").read_text().split())
        except (OSError, ValueError):
            return None
        return cls(run_dir, port, controller)

    def _write_config(self) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",  # fabricwatch creates its topics with their settings
            "message.max.bytes": str(BROKER_MESSAGE_MAX_BYTES),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",  # 50 by default: slow to create on 2 cores
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",  # tests start groups often; no 3 s wait each time
            "log.retention.hours": "24",
        }
        (self.run_dir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.run_dir / "log4j2.properties").write_text(
            "status = error\n"
            "appender.file.type = File\n"
            "appender.file.name = file\n"
            f"appender.file.fileName = {self.log_path}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = file\n"
            "logger.kafka.name = kafka\n"
            "logger.kafka.level = INFO\n"
            "logger.state.name = state.change.logger\n"
            "logger.state.level = WARN\n"
        )
        (self.run_dir / "ports").write_text(f"{self.port} {self.controller_port}\n")

    def _jvm(self, main: str, *args: str, heap: str = "-Xmx512m") -> list[str]:
        libs = fetch()
        return [
            java(),
            "-Xms128m",
            heap,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _format(self) -> None:
        """KRaft storage, once per data directory (a restart keeps its data)."""
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: a leading '-' reads as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        argv = self._jvm(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.run_dir / "server.properties"),
            heap="-Xmx256m",
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise BrokerError(f"formatting KRaft storage in {self.data_dir} failed: {tail}")

    # --- life cycle --------------------------------------------------------------------------------

    def pid(self) -> int | None:
        """The PID of this broker's JVM if it is running (a stale pid file is ignored)."""
        try:
            pid = int((self.run_dir / "pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        config = str(self.run_dir / "server.properties").encode()
        if b"kafka.Kafka" in cmdline and config in cmdline:
            try:
                status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return None
            return None if status == "Z" else pid
        return None

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> LocalBroker:
        """Start the JVM detached and wait until the broker answers metadata requests."""
        if self.pid() is not None:
            return self
        self._format()
        argv = self._jvm("kafka.Kafka", str(self.run_dir / "server.properties"))
        with open(self.run_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        (self.run_dir / "pid").write_text(f"{proc.pid}\n")
        (self.run_dir / "bootstrap").write_text(f"{self.bootstrap}\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(f"the broker exited with status {proc.returncode}: {self._log_tail()}")
            if answers(self.bootstrap, timeout_s=2.0):
                return self
            time.sleep(0.5)
        self.stop()
        raise BrokerError(f"the broker did not answer on {self.bootstrap} within {timeout_s:.0f} s: {self._log_tail()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (a clean shutdown), then SIGKILL after ``timeout_s``; True if one was running."""
        pid = self.pid()
        if pid is None:
            (self.run_dir / "pid").unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while self.pid() is not None and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
            while self.pid() is not None:
                _reap(pid)
                time.sleep(0.1)
        _reap(pid)
        (self.run_dir / "pid").unlink(missing_ok=True)
        return True

    def _log_tail(self) -> str:
        lines: list[str] = []
        for name in ("stdout.log", "broker.log"):
            try:
                text = (self.run_dir / name).read_text(errors="replace")
            except OSError:
                continue
            lines += [ln for ln in text.splitlines() if "ERROR" in ln or "Exception" in ln or "Error:" in ln]
        return " | ".join(lines[-3:]) or f"see {self.log_path}"


def _reap(pid: int) -> None:
    """Collect the exit status of a broker this process started (else it stays a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def answers(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """True when a broker at ``bootstrap`` answers a cluster metadata request with a live broker."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=min(timeout_s, 2.0)):
            pass
    except (OSError, ValueError):
        return False
    from kafka.admin import KafkaAdminClient  # imported late: the CLI path above needs no client
    from kafka.errors import KafkaError

    ms = int(timeout_s * 1000)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=ms, bootstrap_timeout_ms=ms, client_id="fabricwatch-probe"
        )
    except (KafkaError, OSError, ValueError):
        return False
    try:
        return bool(admin.describe_cluster().get("brokers"))
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


# --- command line (scripts/kafka-broker) ---------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka-broker", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop", "status", "fetch"))
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR, help=f"default {RUN_DIR.relative_to(ROOT)}")
    parser.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
    args = parser.parse_args(argv)
    try:
        if args.action == "fetch":
            print(fetch())
            return 0
        broker = LocalBroker.existing(args.run_dir)
        if args.action == "status":
            if broker is None or broker.pid() is None:
                print("kafka-broker: not running", file=sys.stderr)
                return 3
            print(broker.bootstrap)
            print(f"kafka-broker: running, pid {broker.pid()}, {broker.bootstrap}", file=sys.stderr)
            return 0
        if args.action == "stop":
            stopped = broker is not None and broker.stop()
            print(f"kafka-broker: {'stopped' if stopped else 'was not running'}", file=sys.stderr)
            return 0
        if broker is not None and broker.pid() is not None:
            print(broker.bootstrap)
            print(f"kafka-broker: already running, pid {broker.pid()}", file=sys.stderr)
            return 0
        started = time.monotonic()
        broker = LocalBroker.create(args.run_dir, args.port or None).start()
        print(broker.bootstrap)
        print(
            f"kafka-broker: started pid {broker.pid()} on {broker.bootstrap} in {time.monotonic() - started:.1f} s "
            f"(log {broker.log_path})",
            file=sys.stderr,
        )
        return 0
    except BrokerError as exc:
        print(f"kafka-broker: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
