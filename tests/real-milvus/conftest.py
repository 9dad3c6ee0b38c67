"""Fixtures of the real-Milvus suite: one real Milvus 2.3.5 per session (server.py) on the
suite's etcd, its source collections filled once (make_backup.populate), backups made from
its own binlogs on demand, and a runner for the built `lockstep` binary.

Run with `.venv-milvus23/bin/pytest tests/real-milvus` (a venv with milvus==2.3.5 and
pymilvus==2.3.6; see README.md in this directory). Skipped only when CI is not "true" and
milvus-server is missing; under CI=true a missing server fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from make_backup import Target, populate, write_backup  # noqa: E402
from server import MilvusServer, ServerError, etcd_healthy, etcd_url, find_milvus_server  # noqa: E402

# scripts/test.sh stops this run with SIGTERM when a step beside it fails: SIGTERM ends it as
# Ctrl-C would, through the teardown that stops the server. (Not SIGINT: a background job of
# a non-interactive shell starts with SIGINT ignored, and a shell cannot undo an ignore it
# inherited.)
signal.signal(signal.SIGTERM, signal.default_int_handler)

LOCKSTEP_BIN = pathlib.Path(os.environ.get("LOCKSTEP_BIN", REPO / "target" / "debug" / "lockstep"))
LOCKSTEP_TIMEOUT = float(os.environ.get("LOCKSTEP_REAL_TIMEOUT", "900"))
IN_CI = os.environ.get("CI") == "true"


def pytest_report_header(config):
    return [
        f"milvus-server: {find_milvus_server() or 'missing'}; etcd: {etcd_url()}",
        f"lockstep: {LOCKSTEP_BIN} ({'present' if LOCKSTEP_BIN.exists() else 'missing'})",
    ]


@pytest.fixture(scope="session")
def milvus(tmp_path_factory):
    if find_milvus_server() is None:
        message = "milvus-server is missing: pip install milvus==2.3.5 (see tests/real-milvus/README.md)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    if not etcd_healthy(etcd_url()):
        pytest.fail(f"no etcd answers at {etcd_url()}/health (set LOCKSTEP_TEST_ETCD or start etcd)")
    server = MilvusServer(tmp_path_factory.mktemp("milvus23"))
    try:
        server.start()
    except ServerError as exc:
        pytest.fail(f"Milvus 2.3.5 did not start: {exc}")
    print(f"\nMilvus {server.version} up in {server.start_seconds:.1f}s at {server.uri}, data {server.data_dir}")
    try:
        yield server
    finally:
        code = server.stop()
        print(f"\nMilvus stopped (wrapper exit {code})")


@pytest.fixture(scope="session")
def target(milvus) -> Target:
    return Target.from_server(milvus)


@pytest.fixture(scope="session")
def sources(target):
    """The source collections, by name: src_ints, src_strs, src_pkey."""
    return {s.name: s for s in populate(target, "src")}


class Backups:
    """Backups of the source collections, made once per name."""

    def __init__(self, target: Target, sources: dict):
        self.target = target
        self.sources = sources
        self.made: dict[str, pathlib.Path] = {}

    def get(
        self, name: str, collections=None, inflate=None, drop_binlogs_of_one_segment=False, deletes_to_l0=False
    ) -> pathlib.Path:
        if name not in self.made:
            self.made[name] = write_backup(
                self.target,
                collections or sorted(self.sources),
                name,
                "backup",
                self.sources,
                inflate,
                drop_binlogs_of_one_segment,
                deletes_to_l0,
            )
        return self.made[name]

    def expected(self, name: str) -> dict:
        return json.loads((self.made[name] / "expected.json").read_text())


@pytest.fixture(scope="session")
def backups(target, sources) -> Backups:
    return Backups(target, sources)


class Result:
    def __init__(self, code: int, stdout: str, stderr: str, report: dict | None, workdir: pathlib.Path):
        self.code, self.stdout, self.stderr, self.report, self.workdir = code, stdout, stderr, report, workdir

    def text(self) -> str:
        """Everything lockstep said: the report, stdout and stderr."""
        return "\n".join([json.dumps(self.report) if self.report else "", self.stdout, self.stderr])

    def __str__(self) -> str:
        tail = "\n".join(self.stderr.splitlines()[-40:])
        return f"exit {self.code}\n--- stdout ---\n{self.stdout[-6000:]}\n--- stderr (tail) ---\n{tail}"


def _unwrap(value):
    """`run --output json` prints {"refused_files": [...], "reports": [report, ...]}; a
    single report is taken as is."""
    if isinstance(value, dict) and isinstance(value.get("reports"), list):
        if value["reports"]:
            return value["reports"][-1]
        return value if value.get("refused_files") else None
    return value


def _report(stdout: str, state: pathlib.Path) -> dict | None:
    """The report of the one job run: from stdout, else the newest under STATE/reports/. A
    job file refused before it became a restore has none: then the refusal itself."""
    text = stdout.strip()
    if text:
        try:
            value = json.loads(text)
            if isinstance(value, list) and value:
                value = value[-1]
            value = _unwrap(value)
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
        for line in reversed(text.splitlines()):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            value = _unwrap(value)
            if isinstance(value, dict):
                return value
    reports = sorted((state / "reports").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if reports:
        return json.loads(reports[-1].read_text())
    return None


class Lockstep:
    """Writes the host config and a job file and runs `lockstep ... run JOB.toml`."""

    def __init__(self, milvus: MilvusServer, workdir: pathlib.Path):
        self.milvus = milvus
        self.workdir = workdir

    def host_config(self, state: pathlib.Path) -> str:
        return (
            f'state_dir = "{state}"\n'
            f"[storages.real]\n"
            f'url = "file://{self.milvus.storage_dir}"\n'
            f"[clusters.real]\n"
            f'uri = "http://127.0.0.1:{self.milvus.proxy_port}"\n'
            f'storage = "real"\n'
            f'storage_type = "local"\n'
            f"[backups]\n"
            f'storage = "real"\n'
            f'root = "backup"\n'
        )

    def job(self, backup: str, restore: dict, strategy: str | None = None, extra: str = "") -> str:
        """A job file; string values are TOML strings, lists TOML arrays of strings; `extra`
        is TOML appended after `[restore]` (another section)."""
        lines = [f'backup = "{backup}"', 'target = "real"']
        if strategy is not None:
            lines.append(f'strategy = "{strategy}"')
        lines.append("[restore]")
        for key, value in restore.items():
            if isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            elif isinstance(value, int):
                lines.append(f"{key} = {value}")
            elif isinstance(value, list):
                lines.append(f"{key} = [{', '.join(json.dumps(v) for v in value)}]")
            else:
                lines.append(f'{key} = "{value}"')
        return "\n".join(lines) + "\n" + extra

    def run(
        self,
        name: str,
        backup: str,
        restore: dict,
        strategy: str | None = None,
        command: str = "run",
        extra: str = "",
    ) -> Result:
        work = self.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        job = work / f"{name}.toml"
        job.write_text(self.job(backup, restore, strategy, extra))
        return self._invoke(work, [command, str(job)])

    def verify(self, name: str, restore_id: str) -> Result:
        """`lockstep verify ID` with the state of the run called `name`."""
        return self._invoke(self.workdir / name, ["verify", restore_id])

    def milvus_backup_yaml(self, form: str) -> str:
        """This server as milvus-backup's own config describes it (local provider), in its
        v2 form with the credentials written in, or in its v1 (0.5) form without them."""
        storage = self.milvus.storage_dir
        if form == "v2":
            return (
                "configVersion: v2\n"
                "milvus:\n"
                '  user: "root"\n'
                '  password: "Milvus"\n'
                "  grpc:\n"
                "    address: 127.0.0.1\n"
                f"    port: {self.milvus.proxy_port}\n"
                "  storage:\n"
                "    provider: local\n"
                f'    rootPath: "{storage}"\n'
                "backup:\n"
                "  storage:\n"
                "    provider: local\n"
                f'    rootPath: "{storage}/backup"\n'
            )
        return (
            "milvus:\n"
            "  address: 127.0.0.1\n"
            f"  port: {self.milvus.proxy_port}\n"
            "  tlsMode: 0\n"
            "minio:\n"
            '  storageType: "local"\n'
            f'  rootPath: "{storage}"\n'
            f'  backupRootPath: "{storage}/backup"\n'
        )

    def restore_as_milvus_backup(self, name: str, form: str, args: list[str], env: dict) -> Result:
        """`lockstep restore ARGS` in a directory holding only milvus-backup's backup.yaml:
        no --config, no lockstep.toml, the state beside the file."""
        work = self.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        (work / "backup.yaml").write_text(self.milvus_backup_yaml(form))
        return self._invoke(work, ["restore", *args], host_config=False, env=env)

    def _invoke(self, work: pathlib.Path, args: list[str], host_config: bool = True, env: dict | None = None) -> Result:
        if not LOCKSTEP_BIN.exists():
            pytest.fail(f"{LOCKSTEP_BIN} is missing: build it with `cargo build -p lockstep` (or set LOCKSTEP_BIN)")
        if host_config:
            state = work / "state"
            host = work / "lockstep.toml"
            host.write_text(self.host_config(state))
            cmd = [str(LOCKSTEP_BIN), "--config", str(host), "--state-dir", str(state), "--output", "json", *args]
        else:
            state = work / ".lockstep"
            cmd = [str(LOCKSTEP_BIN), "--output", "json", *args]
        env = {**os.environ, "LOCKSTEP_LOG": os.environ.get("LOCKSTEP_LOG", "lockstep=info"), **(env or {})}
        started = time.monotonic()
        try:
            done = subprocess.run(
                cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LOCKSTEP_TIMEOUT
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(cmd)} did not finish in {LOCKSTEP_TIMEOUT}s\n{exc.stderr}")
        (work / f"stdout-{args[0]}.txt").write_text(done.stdout)
        (work / f"stderr-{args[0]}.txt").write_text(done.stderr)
        result = Result(done.returncode, done.stdout, done.stderr, _report(done.stdout, state), work)
        print(f"\n$ {' '.join(cmd)}\n  -> exit {done.returncode} in {time.monotonic() - started:.1f}s")
        # A refusal of the config itself is never what a test means by exit 2.
        if done.returncode == 2 and "host config" in result.text() and "refused" in result.text():
            pytest.fail(f"lockstep refused the host config this suite writes (the interface it needs):\n{result}")
        return result


@pytest.fixture
def lockstep(milvus, tmp_path) -> Lockstep:
    return Lockstep(milvus, tmp_path)
