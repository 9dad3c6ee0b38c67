"""lockstep's two-phase restore of a backup of real Milvus 2.3.5 binlogs into a milvus-sim star.

The backup is the suite's full backup (make_backup.py, from the session's real 2.3.5 server's
own insert and delta logs: int64 and varchar keys, float and binary vectors, JSON, a dynamic
field, a partition key, several partitions and segments, deletes). The star is `milvus-sim up`
(Milvus 3.0.0 on every end): a primary "t" replicating to "s1" and "s2", each reading import
files from its own local directory. The host config gives every end its storage, so lockstep
stages the real binlogs into all three; the job names both secondaries, so lockstep takes the
two-phase route (imports held Uncommitted on every end, one commit on "t").

Then, on every end and for every collection, the rows the sim itself shows after deletes
(`GET /sim/v1/state`: its Completed imports' rows less their deletes, per collection and per
job) must equal the rows the backup's source collection holds after its deletes
(expected.json, checked against the real server when the backup was made), and the report's
per-end `imported_rows` must agree.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
import urllib.request

import pytest

from conftest import REPO, Lockstep

FULL = "full_bak"  # the name test_restore.py uses: one backup per session
ENDS = ("t", "s1", "s2")
TARGET, SECONDARIES = ENDS[0], list(ENDS[1:])
SIM_VERSION = "3.0.0"
SIM_BIN = pathlib.Path(os.environ.get("MILVUS_SIM_BIN", REPO / "target" / "debug" / "milvus-sim"))
SIM_START_TIMEOUT = 30.0

STAGES = """[cluster.durations]
pending = "20ms"
preimport = "20ms"
importing = "50ms"
sorting = "20ms"
index_building = "20ms"
committing = "50ms"
"""


class SimStar:
    """A running `milvus-sim up`: end -> uri and storage directory."""

    def __init__(self, process: subprocess.Popen, uris: dict, storage: dict, stderr: pathlib.Path):
        self.process, self.uris, self.storage, self.stderr = process, uris, storage, stderr

    def state(self, end: str) -> dict:
        with urllib.request.urlopen(f"{self.uris[end]}/sim/v1/state", timeout=30) as resp:
            return json.loads(resp.read().decode())

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.stderr.read_text().splitlines()[-lines:])
        except OSError:
            return ""


@pytest.fixture(scope="module")
def sim_star(tmp_path_factory):
    if not SIM_BIN.exists():
        pytest.fail(f"{SIM_BIN} is missing: build it with `cargo build -p milvus-sim` (or set MILVUS_SIM_BIN)")
    root = tmp_path_factory.mktemp("sim-star")
    storage = {end: root / f"storage-{end}" for end in ENDS}
    for path in storage.values():
        path.mkdir()
    topology = root / "topology.toml"
    topology.write_text(
        "".join(
            f'[[cluster]]\nid = "{end}"\nversion = "{SIM_VERSION}"\nimport_in_replicating_cluster = true\n'
            f'[cluster.storage]\nurl = "{storage[end]}"\n{STAGES}\n'
            for end in ENDS
        )
        + f'[replication]\nprimary = "{TARGET}"\nsecondaries = {json.dumps(SECONDARIES)}\n'
    )
    ports = root / "ports.json"
    stderr = root / "milvus-sim.stderr"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            [str(SIM_BIN), "up", str(topology), "--ports-file", str(ports)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    started = time.monotonic()
    try:
        while not ports.exists():
            if process.poll() is not None:
                pytest.fail(f"milvus-sim exited with {process.returncode}:\n{stderr.read_text()}")
            if time.monotonic() - started > SIM_START_TIMEOUT:
                pytest.fail(f"milvus-sim did not write {ports} in {SIM_START_TIMEOUT}s:\n{stderr.read_text()}")
            time.sleep(0.05)
        uris = {}
        for line in ports.read_text().splitlines():
            entry = json.loads(line)
            uris[entry["cluster"]] = entry["uri"]
        assert set(uris) == set(ENDS), uris
        star = SimStar(process, uris, storage, stderr)
        print(f"\nmilvus-sim star up in {time.monotonic() - started:.2f}s: {uris}")
        yield star
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class StarLockstep(Lockstep):
    """The suite's runner with a host config for the sim star: the backups live in the real
    server's storage; every end has its own storage, so lockstep stages into each."""

    def __init__(self, milvus, star: SimStar, workdir: pathlib.Path):
        super().__init__(milvus, workdir)
        self.star = star

    def host_config(self, state: pathlib.Path) -> str:
        text = (
            f'state_dir = "{state}"\n'
            f"[storages.real]\n"
            f'url = "file://{self.milvus.storage_dir}"\n'
        )
        for end in ENDS:
            text += f"[storages.sim-{end}]\n" f'url = "file://{self.star.storage[end]}"\n'
        for end in ENDS:
            text += f"[clusters.{end}]\n" f'uri = "{self.star.uris[end]}"\n' f'storage = "sim-{end}"\n'
        text += "[backups]\n" 'storage = "real"\n' 'root = "backup"\n'
        return text

    def job(self, backup: str, restore: dict, strategy: str | None = None, extra: str = "") -> str:
        lines = [f'backup = "{backup}"', f'target = "{TARGET}"', f"secondaries = {json.dumps(SECONDARIES)}"]
        if strategy is not None:
            lines.append(f'strategy = "{strategy}"')
        if restore:
            body = super().job(backup, restore).split("[restore]\n", 1)[1]
            lines.append("[restore]\n" + body.rstrip("\n"))
        return "\n".join(lines) + "\n" + extra


def _bare(name: str) -> str:
    """`default.src_ints` -> `src_ints`."""
    return name.split(".", 1)[1] if "." in name else name


@pytest.fixture(scope="module")
def star_restore(milvus, backups, sim_star, tmp_path_factory):
    backups.get(FULL)
    expected = backups.expected(FULL)
    runner = StarLockstep(milvus, sim_star, tmp_path_factory.mktemp("lockstep-star"))
    started = time.monotonic()
    result = runner.run("star_full", FULL, {})
    print(f"two-phase restore into the star: exit {result.code} in {time.monotonic() - started:.1f}s")
    if result.report:
        print(f"  outcome {result.report.get('outcome')}: {result.report.get('summary')}")
        print(f"  phases {[(p['phase'], round(p['seconds'], 2)) for p in result.report.get('phases', [])]}")
    return result, expected


def test_two_phase_restore_into_a_sim_star_shows_the_real_rows_on_every_end(sim_star, star_restore):
    result, expected = star_restore
    context = f"{result}\n--- milvus-sim stderr (tail) ---\n{sim_star.stderr_tail()}"
    assert result.code == 0, context
    report = result.report
    assert report is not None, context
    assert report["outcome"] == "succeeded", context
    assert report.get("route") == "two_phase", context
    roles = {e["name"]: e["role"] for e in report["ends"]}
    assert roles == {TARGET: "target", **{s: "secondary" for s in SECONDARIES}}, report["ends"]
    assert report["divergences"] == [], report["divergences"]
    sources = sorted(expected["collections"])
    assert sorted(_bare(c["target"]) for c in report["collections"]) == sources, report["collections"]
    assert all(c["committed"] for c in report["collections"]), report["collections"]
    staging = report.get("staging") or {}
    assert staging.get("files") == expected["binlog_files"], staging
    assert staging.get("bytes") == expected["binlog_bytes"], staging
    assert len(staging.get("destinations", [])) == len(ENDS), staging

    want = {name: expected["collections"][name]["rows"] for name in sources}
    inserted = {name: expected["collections"][name]["inserted"] for name in sources}
    # What a count of delete entries would give instead of matched deletes (a delta log may
    # hold pks its segment never had), to tell the two apart in a failure.
    entries = {name: 0 for name in sources}
    for seg in expected["segments"].values():
        entries[seg["collection"]] += seg["delete_entries"]

    # The sim's own state: per end, per collection.
    seen = {}
    for end in ENDS:
        state = sim_star.state(end)
        assert state["version"] == SIM_VERSION, (end, state["version"])
        assert state["role"] == ("primary" if end == TARGET else "secondary"), (end, state["role"])
        collections = {c["name"]: c for c in state["collections"] if c["db_name"] == "default"}
        assert sorted(collections) == sources, (end, sorted(collections))
        jobs = state["jobs"]
        failed = [(j["job_id"], j["collection_name"], j["reason"]) for j in jobs if j["state"] != "Completed"]
        assert not failed, f"{end}: jobs not Completed: {failed}\n{context}"
        for name in sources:
            coll = collections[name]
            visible = coll["visible_rows"] - coll["visible_deleted_rows"]
            by_jobs = sum(
                j["total_rows"] - j["deleted_rows"] for j in jobs if j["collection_name"] == name
            )
            seen[(end, name)] = {
                "visible_rows": coll["visible_rows"],
                "visible_deleted_rows": coll["visible_deleted_rows"],
                "after_deletes": visible,
                "by_jobs": by_jobs,
                "imports": len(coll["completed_imports"]),
                "partitions": len(coll["partitions"]),
            }
    print("\nper end and collection (sim state):")
    for (end, name), got in sorted(seen.items()):
        print(
            f"  {end:>2} {name}: {got['after_deletes']} rows after deletes "
            f"({got['visible_rows']} inserted, {got['visible_deleted_rows']} deletes counted, "
            f"{got['imports']} imports); want {want[name]} "
            f"(inserted {inserted[name]}, delete entries {entries[name]})"
        )

    # The report's figures: each end's imported rows per job, summed per collection.
    from_report = {(end, name): 0 for end in ENDS for name in sources}
    for job in report["jobs"]:
        name = _bare(job["collection"])
        ends = {s["end"]: s for s in job["states"]}
        assert sorted(ends) == sorted(ENDS), job
        for end, s in ends.items():
            assert s["state"] == "Completed", job
            assert s["imported_rows"] is not None, job
            from_report[(end, name)] += s["imported_rows"]
    assert sum(j["rows"] for j in report["jobs"]) == sum(inserted.values()), report["jobs"]

    # Every end and collection checked before failing, so a failure shows the whole picture.
    problems = []
    for (end, name), got in sorted(seen.items()):
        if got["visible_rows"] != inserted[name]:
            problems.append(f"{end}: {name} imported {got['visible_rows']} rows before deletes, the backup holds {inserted[name]}")
        if got["by_jobs"] != got["after_deletes"]:
            problems.append(f"{end}: {name} jobs give {got['by_jobs']} rows after deletes, the collection {got['after_deletes']}")
        if got["after_deletes"] != want[name]:
            problems.append(
                f"{end}: {name} shows {got['after_deletes']} rows after deletes, the source holds {want[name]} "
                f"(inserted {inserted[name]}, delete entries in its delta logs {entries[name]})"
            )
        if from_report[(end, name)] != want[name]:
            problems.append(f"{end}: {name} report says {from_report[(end, name)]} rows imported, the source holds {want[name]}")
        if from_report[(end, name)] != got["after_deletes"]:
            problems.append(f"{end}: {name} report says {from_report[(end, name)]} rows imported, the sim shows {got['after_deletes']}")
        if got["partitions"] != expected["collections"][name]["partitions"]:
            problems.append(f"{end}: {name} has {got['partitions']} partitions, the backup {expected['collections'][name]['partitions']}")
    assert not problems, "\n".join(problems)
