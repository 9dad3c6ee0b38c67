"""Starts `milvus-sim up` for the suite: a primary "a" replicating to a standby "b".

The built binary is target/debug/milvus-sim (or $MILVUS_SIM_BIN). Each cluster reads import
files from its own directory, so tests write files into both, as the CDC guide uploads files
to both clusters' object storage.
"""

import json
import os
import pathlib
import subprocess
import time

import pytest
import requests
from pymilvus import MilvusClient
from pymilvus.bulk_writer import get_import_progress

REPO = pathlib.Path(__file__).resolve().parents[3]
BINARY = pathlib.Path(os.environ.get("MILVUS_SIM_BIN", REPO / "target" / "debug" / "milvus-sim"))

STAGES = """[cluster.durations]
pending = "20ms"
preimport = "20ms"
importing = "50ms"
sorting = "20ms"
index_building = "20ms"
committing = "50ms"
"""


class Sim:
    """A running `milvus-sim up`: cluster id -> uri and storage directory."""

    def __init__(self, uris, storage):
        self.uris = uris
        self.storage = storage

    def write_file(self, name, content, clusters=("a", "b")):
        """Writes `content` (text, or bytes for binary files such as Parquet) at `name`."""
        for cluster in clusters:
            path = self.storage[cluster] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)

    def create_collection(self, name, **kwargs):
        """Creates `name` on the primary (MilvusClient.create_collection's arguments) and
        waits until it has replicated to the standby."""
        MilvusClient(uri=self.uris["a"]).create_collection(name, **kwargs)
        standby = MilvusClient(uri=self.uris["b"])
        self.wait_until(lambda: standby.has_collection(name), f"{name} on the standby")

    def progress(self, cluster, job_id):
        """The `data` of the job's get_progress answer on `cluster`."""
        answer = get_import_progress(url=self.uris[cluster], job_id=job_id).json()
        assert answer["code"] == 0, answer
        return answer["data"]

    def wait_state(self, job_id, state):
        """Waits until the job is in `state` on the primary and on the standby. A job that
        fails instead stops the wait at once, its reason in the assertion."""

        def reached(cluster):
            data = self.progress(cluster, job_id)
            if data["state"] == "Failed" != state:
                raise AssertionError(f"waiting for {state} on {cluster}: failed, {data.get('reason')}")
            return data["state"] == state

        for cluster in ("a", "b"):
            self.wait_until(lambda: reached(cluster), f"{state} on {cluster}")

    def rest(self, cluster, route, body):
        """POSTs `body` to `cluster`'s /v2/vectordb/jobs/import/{route}; the JSON answer."""
        answer = requests.post(
            f"{self.uris[cluster]}/v2/vectordb/jobs/import/{route}", json=body, timeout=10
        )
        assert answer.status_code == 200
        return answer.json()

    @staticmethod
    def wait_until(predicate, what, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: run `cargo build -p milvus-sim` first")
    root = tmp_path_factory.mktemp("sim")
    storage = {c: root / f"storage-{c}" for c in ("a", "b")}
    topology = root / "topology.toml"
    clusters = "".join(
        f'[[cluster]]\nid = "{c}"\nimport_in_replicating_cluster = true\n'
        f'[cluster.storage]\nurl = "{storage[c]}"\n{STAGES}'
        for c in ("a", "b")
    )
    topology.write_text(clusters + '[replication]\nprimary = "a"\nsecondaries = ["b"]\n')
    ports = root / "ports.json"
    process = subprocess.Popen(
        [str(BINARY), "up", str(topology), "--ports-file", str(ports)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not ports.exists():
            if process.poll() is not None:
                pytest.fail(f"milvus-sim exited with {process.returncode}")
            if time.monotonic() > deadline:
                pytest.fail("milvus-sim did not write its ports file")
            time.sleep(0.05)
        uris = {}
        for line in ports.read_text().splitlines():
            entry = json.loads(line)
            uris[entry["cluster"]] = entry["uri"]
        yield Sim(uris, storage)
    finally:
        process.terminate()
        process.wait(timeout=10)
