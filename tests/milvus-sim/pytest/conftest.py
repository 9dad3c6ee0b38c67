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
        for cluster in clusters:
            path = self.storage[cluster] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


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
