"""Starts and stops a real Milvus 2.3.5 (PyPI `milvus`, the `milvus-server` wrapper) beside an
external etcd, for the real-Milvus suite.

The wrapper unpacks a real Milvus 2.3.5 standalone binary into DIR/bin, writes DIR/configs/
milvus.yaml from its template and runs `milvus run standalone` with local storage under
DIR/data (`localStorage.path`). Its embedded etcd always listens on 2379/2380, so it runs here
on the suite's own etcd (env LOCKSTEP_TEST_ETCD, default http://127.0.0.1:2379) under an etcd
root path of its own, unique per start, which is also where datacoord keeps segment meta.

Compaction is off (`dataCoord.enableCompaction=false` and
`dataCoord.compaction.enableAutoCompaction=false`, both keys of the 2.3.5 template; the
wrapper silently ignores an `--extra-config` key its template does not have, so `start`
checks the written milvus.yaml for every key it set) so the segments a test flushed stay the
segments a backup names.

It stops on SIGINT to the wrapper, which terminates the milvus child and kills it after 1 s.
`kill` is the crash instead: SIGKILL to the wrapper's whole process group, nothing flushed or
closed; `restart` then starts it again on the same data dir, etcd root path and proxy port, so
its meta and segments are the ones it had persisted and a lockstep host config written before
the crash still points at it.

    python server.py --data DIR [--proxy-port P] [--exit-after-start]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

DEFAULT_ETCD = "http://127.0.0.1:2379"
START_TIMEOUT = float(os.environ.get("LOCKSTEP_MILVUS_START_TIMEOUT", "240"))
STOP_TIMEOUT = 60.0
LOG_TAIL_LINES = 60
# How long `restart` waits for the killed server's proxy port to be bindable again: the
# connections it had stay in TIME_WAIT or FIN_WAIT_2 (60 s on Linux), and the wrapper binds
# without SO_REUSEADDR.
PORT_FREE_TIMEOUT = 90.0

# Keys `start` sets beyond the etcd ones. The wrapper replaces only keys its template has.
COMPACTION_OFF = {
    "dataCoord.enableCompaction": "false",
    "dataCoord.compaction.enableAutoCompaction": "false",
}


def etcd_url() -> str:
    return os.environ.get("LOCKSTEP_TEST_ETCD", DEFAULT_ETCD).rstrip("/")


def etcd_endpoint(url: str) -> str:
    """`http://127.0.0.1:2379` -> `127.0.0.1:2379`, as Milvus's etcd.endpoints wants it."""
    return url.split("://", 1)[-1].rstrip("/")


def etcd_healthy(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            return json.loads(resp.read().decode()).get("health") == "true"
    except (OSError, ValueError, urllib.error.URLError):
        return False


def find_milvus_server() -> str | None:
    """The `milvus-server` wrapper: $LOCKSTEP_MILVUS_SERVER, beside this interpreter (the
    venv's bin/), or on PATH."""
    explicit = os.environ.get("LOCKSTEP_MILVUS_SERVER")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = pathlib.Path(sys.executable).parent / "milvus-server"
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("milvus-server")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_bindable(port: int) -> bool:
    """Whether the wrapper could take `port` now: it binds 127.0.0.1 without SO_REUSEADDR,
    which fails while a connection of the port's last listener is still closing (TIME_WAIT,
    FIN_WAIT_2)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return True
        except OSError:
            return False


def parse_milvus_yaml(text: str) -> dict[str, str]:
    """Dotted key -> scalar value of the wrapper's milvus.yaml, read the way the wrapper
    itself rewrites it (two spaces per level, `key: value # comment`); lists are skipped."""
    values: dict[str, str] = {}
    stack: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("-"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if ":" not in stripped:
            continue
        key, _, rest = stripped.partition(":")
        key = key.strip()
        if not key.replace("_", "").replace(".", "").isalnum():
            continue
        level = indent // 2
        stack = stack[:level]
        stack.append(key)
        value = rest.split(" #", 1)[0].strip()
        if value.startswith("#"):
            value = ""
        if value:
            values[".".join(stack)] = value.strip("\"'")
    return values


def tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join(content[-lines:])


class ServerError(RuntimeError):
    pass


def group_gone(pgid: int, within: float) -> bool:
    """Whether no process of group `pgid` is left, waiting up to `within` seconds for the
    last to go (one we may not signal counts as gone: it is not ours)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


class MilvusServer:
    """One real Milvus 2.3.5 standalone under `data_dir`."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        proxy_port: int | None = None,
        etcd: str | None = None,
        root_path: str | None = None,
        extra_config: dict[str, str] | None = None,
    ):
        self.data_dir = pathlib.Path(data_dir).resolve()
        self.requested_proxy_port = proxy_port
        self.etcd = (etcd or etcd_url()).rstrip("/")
        self.root_path = root_path or f"lockstep-real-{uuid.uuid4().hex[:12]}"
        self.extra_config = dict(extra_config or {})
        self.process: subprocess.Popen | None = None
        self.config: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self.version: str | None = None
        self.start_seconds: float | None = None
        self.restarts = 0
        self._wrapper_log = None

    # -- where things are ---------------------------------------------------------------

    @property
    def config_path(self) -> pathlib.Path:
        return self.data_dir / "configs" / "milvus.yaml"

    @property
    def storage_dir(self) -> pathlib.Path:
        """`localStorage.path`: where the server keeps insert_log/, delta_log/, stats_log/."""
        return pathlib.Path(self.config.get("localStorage.path", str(self.data_dir / "data")))

    @property
    def proxy_port(self) -> int:
        return self.ports["proxy"]

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def meta_root(self) -> str:
        """The etcd prefix of the server's meta (`etcd.rootPath/etcd.metaSubPath`)."""
        return f"{self.root_path}/{self.config.get('etcd.metaSubPath', 'meta')}"

    def log_files(self) -> list[pathlib.Path]:
        logs = self.data_dir / "logs"
        found = [logs / "wrapper.log", logs / "milvus-stdout.log", logs / "milvus-stderr.log"]
        if logs.is_dir():
            found += sorted(p for p in logs.glob("*.log") if p not in found)
        return [p for p in found if p.exists()]

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for path in self.log_files():
            parts.append(f"--- tail of {path} ---\n{tail(path, lines)}")
        return "\n".join(parts) or f"(no logs under {self.data_dir / 'logs'})"

    # -- start --------------------------------------------------------------------------

    def command(self, exe: str, proxy_port: int) -> list[str]:
        extra = {
            "etcd.use.embed": "false",
            "etcd.endpoints": etcd_endpoint(self.etcd),
            "etcd.rootPath": self.root_path,
            **COMPACTION_OFF,
            **self.extra_config,
        }
        cmd = [exe, "--data", str(self.data_dir), "--proxy-port", str(proxy_port)]
        for key, value in extra.items():
            cmd += ["--extra-config", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT) -> "MilvusServer":
        if self.process is not None:
            raise ServerError("already started")
        exe = find_milvus_server()
        if exe is None:
            raise ServerError("milvus-server not found (pip install milvus==2.3.5)")
        if not etcd_healthy(self.etcd):
            raise ServerError(f"no etcd answers at {self.etcd}/health")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        if self.config_path.exists():
            self.config_path.unlink()  # so a stale file is never read as this start's
        proxy_port = self.requested_proxy_port or free_port()
        cmd = self.command(exe, proxy_port)
        started = time.monotonic()
        self._wrapper_log = open(self.data_dir / "logs" / "wrapper.log", "w")
        self.process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._wrapper_log,
            stderr=subprocess.STDOUT,
            cwd=str(self.data_dir),
            # A group of its own: a Ctrl-C meant for the test runner does not reach it, and a
            # kill after a failed stop reaches the milvus child too.
            start_new_session=True,
        )
        try:
            self._wait_config(started + timeout)
            self._check_config()
            self._wait_grpc(started + timeout)
        except BaseException as exc:
            log = self.log_tail()
            self.stop()
            if isinstance(exc, ServerError):
                raise ServerError(f"{exc}\n{log}") from None
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ServerError(f"milvus-server exited with {self.process.returncode}")

    def _wait_config(self, deadline: float) -> None:
        while True:
            self._alive()
            if self.config_path.exists():
                # The wrapper writes the file in one call before it starts milvus: taken once
                # two reads 0.2 s apart agree and it names the proxy port.
                text = self.config_path.read_text()
                time.sleep(0.2)
                if text and text == self.config_path.read_text():
                    self.config = parse_milvus_yaml(text)
                    if "proxy.port" in self.config:
                        break
            if time.monotonic() > deadline:
                raise ServerError(f"{self.config_path} was not written in time")
            time.sleep(0.1)
        self.ports = {
            "proxy": int(self.config["proxy.port"]),
            "proxy_internal": int(self.config.get("proxy.internalPort", 0)),
            "root_coord": int(self.config.get("rootCoord.port", 0)),
            "query_coord": int(self.config.get("queryCoord.port", 0)),
            "query_node": int(self.config.get("queryNode.port", 0)),
            "index_node": int(self.config.get("indexNode.port", 0)),
            "data_coord": int(self.config.get("dataCoord.port", 0)),
            "data_node": int(self.config.get("dataNode.port", 0)),
        }

    def _check_config(self) -> None:
        expected = {
            "etcd.use.embed": "false",
            "etcd.endpoints": etcd_endpoint(self.etcd),
            "etcd.rootPath": self.root_path,
            **COMPACTION_OFF,
            **{k: str(v) for k, v in self.extra_config.items()},
        }
        wrong = {
            key: (want, self.config.get(key))
            for key, want in expected.items()
            if self.config.get(key, "").lower() != str(want).lower()
        }
        if wrong:
            raise ServerError(f"milvus.yaml does not hold the keys set (want, got): {wrong}")

    def _wait_grpc(self, deadline: float) -> None:
        from pymilvus import connections, utility

        alias = f"probe-{uuid.uuid4().hex[:8]}"
        last = None
        while time.monotonic() < deadline:
            self._alive()
            try:
                left = max(0.5, min(3.0, deadline - time.monotonic()))
                connections.connect(alias=alias, host=self.host, port=str(self.proxy_port), timeout=left)
                try:
                    self.version = utility.get_server_version(using=alias, timeout=max(1.0, left))
                    return
                finally:
                    connections.disconnect(alias)
            except Exception as exc:  # noqa: BLE001 - anything until it answers
                last = exc
                time.sleep(0.5)
        raise ServerError(f"gRPC on {self.proxy_port} did not answer in time: {last}")

    # -- stop ---------------------------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGINT to the wrapper, wait up to `timeout`, then SIGKILL its process group."""
        process, self.process = self.process, None
        code = None
        if process is not None:
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGINT)
                    code = process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    print(f"milvus-server {process.pid} still running after {timeout}s: killing its group",
                          file=sys.stderr)
                    try:
                        os.killpg(process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    code = process.wait(timeout=10)
            else:
                code = process.returncode
            # The milvus child is in the same group; make sure nothing of it outlives the wrapper.
            if not group_gone(process.pid, within=10):
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._wrapper_log is not None:
            self._wrapper_log.close()
            self._wrapper_log = None
        return code

    # -- crash and restart --------------------------------------------------------------

    def kill(self) -> int | None:
        """SIGKILL to the wrapper's whole process group at once, as a machine crash: the
        milvus child gets no SIGTERM, so it flushes nothing, closes no connection cleanly and
        leaves its etcd sessions to expire with their leases. What survives is what it had
        persisted: its etcd meta under `root_path` and the objects under `storage_dir`.
        The ports, root path and config are kept for `restart`. Returns the wrapper's exit
        status (-9)."""
        process, self.process = self.process, None
        if process is None:
            raise ServerError("not running")
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = process.wait(timeout=10)
        # Reaped the wrapper; the milvus child was killed by the same signal, but is reaped by
        # init, so wait for the group to be gone before anything binds its ports again.
        if not group_gone(process.pid, within=10):
            raise ServerError(f"process group {process.pid} still there 10 s after SIGKILL")
        if self._wrapper_log is not None:
            self._wrapper_log.close()
            self._wrapper_log = None
        return code

    def restart(self, timeout: float = START_TIMEOUT) -> "MilvusServer":
        """Starts the server again after `kill` (or `stop`) on the same data dir, etcd root
        path and proxy port, so that clients configured before (a lockstep host config, a
        pymilvus alias) reach it at the same address and it recovers its own meta and
        segments. The other ports are the wrapper's choice again. The previous run's logs are
        kept under logs/run-N/ (the wrapper truncates its log files on start).

        Waits first until the proxy port is bindable (see `port_bindable`; about 60 s after
        a kill), then up to `timeout` for the start itself, which may take longer than a
        first start (seen: 3 to 6 s, once 55 s with rootcoord waiting for datacoord)."""
        if self.process is not None:
            raise ServerError("still running: kill() or stop() it first")
        if not self.ports:
            raise ServerError("never started: nothing to restart")
        port = self.ports["proxy"]
        deadline = time.monotonic() + PORT_FREE_TIMEOUT
        while not port_bindable(port):
            if time.monotonic() > deadline:
                raise ServerError(f"proxy port {port} not bindable {PORT_FREE_TIMEOUT:.0f}s after the kill")
            time.sleep(0.5)
        self.restarts += 1
        logs = self.data_dir / "logs"
        kept = logs / f"run-{self.restarts}"
        kept.mkdir(parents=True, exist_ok=True)
        for path in logs.glob("*.log"):
            path.rename(kept / path.name)
        self.requested_proxy_port = port
        return self.start(timeout=timeout)

    def __enter__(self) -> "MilvusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def describe(self) -> dict:
        return {
            "data_dir": str(self.data_dir),
            "storage_dir": str(self.storage_dir),
            "uri": self.uri,
            "ports": self.ports,
            "etcd": self.etcd,
            "etcd_root_path": self.root_path,
            "version": self.version,
            "start_seconds": round(self.start_seconds or 0, 1),
            "pid": self.process.pid if self.process else None,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the server's base dir (configs/, logs/, data/)")
    parser.add_argument("--proxy-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--etcd", default=None, help=f"default: $LOCKSTEP_TEST_ETCD or {DEFAULT_ETCD}")
    parser.add_argument("--root-path", default=None, help="etcd root path (default: unique)")
    parser.add_argument("--extra-config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT)
    parser.add_argument("--exit-after-start", action="store_true", help="start, print, stop")
    parser.add_argument("--run-for", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in args.extra_config)
    server = MilvusServer(args.data, args.proxy_port, args.etcd, args.root_path, extra)
    try:
        server.start(timeout=args.timeout)
    except ServerError as exc:
        print(f"start failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(server.describe()), flush=True)
    if args.exit_after_start:
        server.stop()
        return 0
    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    deadline = time.monotonic() + args.run_for if args.run_for else None
    try:
        while not stop["now"]:
            if server.process is None or server.process.poll() is not None:
                print("milvus-server exited", file=sys.stderr)
                print(server.log_tail(), file=sys.stderr)
                return 1
            if deadline and time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        code = server.stop()
        print(f"stopped (wrapper exit {code})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
