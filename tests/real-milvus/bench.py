"""A benchmark, run by hand: lockstep's restore against Milvus's own v1 import, same backup,
same server (a real Milvus 2.3.5 on the suite's etcd, see README.md).

    .venv-milvus23/bin/python tests/real-milvus/bench.py [--rounds N] [--lockstep PATH]

Starts one server (a data directory of its own, a free proxy port), fills the source
collections and writes one backup of all of them (as conftest does), then for each round i:

(a) direct: reference_import.restore, i.e. CreateCollection, CreatePartition and one gRPC
    `Import` per segment (backup=true), polled until every import is Completed, into
    `{source}_ref{i}`; timed from the first DDL to the last Completed seen;
(b) lockstep: `lockstep run` of the same backup, no strategy, the host config and job file
    conftest writes (storage_type = "local"), suffix `_ls{i}`; timed as the process's wall clock.

After each, count(*) of every restored collection must equal expected.json (the check, an index
and a load, is not timed); then the restored collections are dropped so each round starts from
the same server state. Prints a table of rounds, the medians, the binary measured and the number
of import jobs each side ran. The server is stopped at the end, also on error.

Environment: LOCKSTEP_TEST_ETCD (etcd, default http://127.0.0.1:2379), LOCKSTEP_LOG (lockstep's
log filter, default lockstep=info; its stderr goes to WORK/ls{i}/stderr.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import reference_import  # noqa: E402
from conftest import Lockstep, _report  # noqa: E402  (the host config and job file the tests write)
from make_backup import Target, count_rows, populate, write_backup  # noqa: E402
from server import MilvusServer, etcd_healthy, etcd_url, find_milvus_server  # noqa: E402

BACKUP = "bench_bak"
LOCKSTEP_TIMEOUT = float(os.environ.get("LOCKSTEP_REAL_TIMEOUT", "900"))
DROP_TIMEOUT = 60.0


class BenchError(RuntimeError):
    pass


def default_lockstep() -> pathlib.Path:
    release = REPO / "target" / "release" / "lockstep"
    return release if release.exists() else REPO / "target" / "debug" / "lockstep"


def build_kind(path: pathlib.Path) -> str:
    parts = path.resolve().parts
    for kind in ("release", "debug"):
        if kind in parts:
            return kind
    return f"unknown ({path})"


def check_counts(target: Target, expected: dict, suffix: str, side: str) -> None:
    wrong = {}
    for source, want in expected["collections"].items():
        got = count_rows(target, source + suffix)
        if got != want["rows"]:
            wrong[source + suffix] = (got, want["rows"])
    if wrong:
        raise BenchError(f"{side}: count(*) differs from expected.json (got, want): {wrong}")


def drop(target: Target, names: list[str]) -> None:
    from pymilvus import utility

    alias = target.connect()
    for name in names:
        if utility.has_collection(name, using=alias, timeout=DROP_TIMEOUT):
            utility.drop_collection(name, using=alias, timeout=DROP_TIMEOUT)


def run_direct(target: Target, backup_dir: pathlib.Path, suffix: str) -> tuple[float, int]:
    started = time.monotonic()
    results = reference_import.restore(target, backup_dir, suffix, log=lambda *_: None)
    seconds = time.monotonic() - started
    failed = {
        f"{source}/{seg}": (state, reason)
        for source, segments in results.items()
        for seg, (state, _rows, reason) in segments.items()
        if state != "ImportCompleted"
    }
    if failed:
        raise BenchError(f"direct {suffix}: imports not Completed: {failed}")
    return seconds, sum(len(segments) for segments in results.values())


def run_lockstep(exe: pathlib.Path, milvus: MilvusServer, work: pathlib.Path, suffix: str) -> tuple[float, dict]:
    runner = Lockstep(milvus, work)
    name = suffix.lstrip("_")
    wd = work / name
    wd.mkdir(parents=True, exist_ok=True)
    state = wd / "state"
    host = wd / "lockstep.toml"
    job = wd / f"{name}.toml"
    host.write_text(runner.host_config(state))
    job.write_text(runner.job(BACKUP, {"suffix": suffix}))
    cmd = [str(exe), "--config", str(host), "--state-dir", str(state), "--output", "json", "run", str(job)]
    env = {**os.environ, "LOCKSTEP_LOG": os.environ.get("LOCKSTEP_LOG", "lockstep=info")}
    with open(wd / "stdout.txt", "w") as out, open(wd / "stderr.txt", "w") as err:
        started = time.monotonic()
        process = subprocess.Popen(cmd, cwd=wd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            code = process.wait(timeout=LOCKSTEP_TIMEOUT)
        except BaseException:
            process.kill()
            process.wait(timeout=30)
            raise
        seconds = time.monotonic() - started
    stdout = (wd / "stdout.txt").read_text()
    report = _report(stdout, state)
    if code != 0:
        tail = "\n".join((wd / "stderr.txt").read_text(errors="replace").splitlines()[-30:])
        raise BenchError(f"lockstep {suffix}: exit {code}\n$ {' '.join(cmd)}\n--- stdout ---\n{stdout[-4000:]}\n--- stderr (tail) ---\n{tail}")
    if report is None:
        raise BenchError(f"lockstep {suffix}: no report in {wd}")
    return seconds, report


def phases_line(report: dict) -> str:
    phases = report.get("phases") or []
    return ", ".join(f"{p.get('phase')} {p.get('seconds', 0):.2f}s" for p in phases) or "(no phases)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lockstep", type=pathlib.Path, default=None,
                        help="default: target/release/lockstep if it exists, else target/debug/lockstep")
    parser.add_argument("--data", type=pathlib.Path, default=None, help="the server's data dir (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and lockstep's work dirs")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    exe = (args.lockstep or default_lockstep()).resolve()
    if not exe.exists():
        print(f"{exe} is missing (cargo build -p lockstep, or --lockstep PATH)", file=sys.stderr)
        return 2
    if find_milvus_server() is None:
        print("milvus-server is missing (pip install milvus==2.3.5, see README.md)", file=sys.stderr)
        return 2
    if not etcd_healthy(etcd_url()):
        print(f"no etcd answers at {etcd_url()}/health", file=sys.stderr)
        return 2

    whole = time.monotonic()
    base = args.data or pathlib.Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    data_dir = base / "milvus"
    work = base / "work"
    work.mkdir(parents=True, exist_ok=True)
    kind = build_kind(exe)
    print(f"lockstep: {exe} ({kind}); etcd {etcd_url()}; work {base}", flush=True)

    server = MilvusServer(data_dir)
    rows = []
    failed = True
    try:
        server.start()
        print(f"Milvus {server.version} up in {server.start_seconds:.1f}s at {server.uri}", flush=True)
        target = Target.from_server(server)
        t = time.monotonic()
        sources = {s.name: s for s in populate(target, "src", log=lambda *_: None)}
        backup_dir = write_backup(target, sorted(sources), BACKUP, "backup", sources, log=lambda *_: None)
        expected = json.loads((backup_dir / "expected.json").read_text())
        segments = len(expected["segments"])
        print(f"sources filled and backup {BACKUP} written in {time.monotonic() - t:.1f}s: "
              f"{len(expected['collections'])} collections, {segments} segments, "
              f"{expected['binlog_files']} binlogs", flush=True)

        for i in range(1, args.rounds + 1):
            ref, ls = f"_ref{i}", f"_ls{i}"
            direct_s, direct_jobs = run_direct(target, backup_dir, ref)
            check_counts(target, expected, ref, "direct")
            drop(target, [s + ref for s in expected["collections"]])

            lock_s, report = run_lockstep(exe, server, work, ls)
            check_counts(target, expected, ls, "lockstep")
            drop(target, [s + ls for s in expected["collections"]])
            lock_jobs = len(report.get("jobs") or [])
            rows.append((i, direct_s, lock_s, direct_jobs, lock_jobs))
            print(f"round {i}: direct {direct_s:.2f}s ({direct_jobs} imports), lockstep {lock_s:.2f}s "
                  f"({lock_jobs} import jobs, outcome {report.get('outcome')}); phases: {phases_line(report)}",
                  flush=True)
        failed = False
    finally:
        code = server.stop()
        print(f"Milvus stopped (wrapper exit {code})", file=sys.stderr, flush=True)
        if not args.keep and not failed and args.data is None:
            shutil.rmtree(base, ignore_errors=True)
        elif failed:
            print(f"kept {base} for a look", file=sys.stderr)

    print()
    print(f"{'round':>5}  {'direct s':>9}  {'lockstep s':>10}  {'ratio':>6}")
    for i, d, lk, _, _ in rows:
        print(f"{i:>5}  {d:>9.2f}  {lk:>10.2f}  {lk / d:>6.2f}")
    med_d = statistics.median(r[1] for r in rows)
    med_l = statistics.median(r[2] for r in rows)
    med_r = statistics.median(r[2] / r[1] for r in rows)
    print(f"{'med':>5}  {med_d:>9.2f}  {med_l:>10.2f}  {med_r:>6.2f}  (median ratio; ratio of medians {med_l / med_d:.2f})")
    jobs_d = sorted({r[3] for r in rows})
    jobs_l = sorted({r[4] for r in rows})
    print(f"import jobs per round: direct {','.join(map(str, jobs_d))}, lockstep {','.join(map(str, jobs_l))}"
          f" ({segments} segments in the backup)")
    print(f"binary: {kind} ({exe}); whole run {time.monotonic() - whole:.1f}s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
