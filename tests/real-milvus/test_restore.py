"""lockstep against a real Milvus 2.3.5: restores of backups made from that server's own
binlogs (make_backup.py), checked with pymilvus 2.3 (count(*) after an index and a load, the
full set of primary keys, a sample of whole rows) against expected.json and the source
collections. Each test restores under names of its own (a suffix or a rename per test).

Without a strategy lockstep must pick milvus-backup's v1 per-segment import for 2.3 (one gRPC
Import per segment, `backup=true`, absolute paths under localStorage.path because the cluster's
storage_type is "local"). `test_milvus_own_v1_import_restores_the_backup` does that restore with
Milvus's own Import and no lockstep, so a failure of the lockstep tests that it passes is
lockstep's.
"""

from __future__ import annotations

import json
import random

import pytest

import make_backup
from make_backup import count_rows, describe, ensure_index_and_load, primary_keys
from conftest import Lockstep
import make_snapshot
import reference_import

FULL = "full_bak"


def _collections(target) -> set[str]:
    from pymilvus import utility

    return set(utility.list_collections(using=target.connect()))


def _plain(value):
    """pymilvus rows with numpy scalars and bytes made comparable."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "item"):
        return value.item()
    return value


def _rows(target, name: str, pks: list) -> dict:
    from pymilvus import Collection

    coll = Collection(name, using=target.connect())
    pk = next(f.name for f in coll.schema.fields if f.is_primary)
    expr = f"{pk} in {json.dumps(pks)}"
    rows = coll.query(expr=expr, output_fields=["*"], consistency_level="Strong", timeout=60)
    return {r[pk]: _plain(r) for r in rows}


def assert_restored(target, source: str, restored: str, expected: dict) -> None:
    want = expected["collections"][source]
    assert count_rows(target, restored) == want["rows"], f"{restored}: count(*)"
    got = primary_keys(target, restored)
    missing = sorted(set(want["pks"]) - set(got))[:10]
    extra = sorted(set(got) - set(want["pks"]))[:10]
    assert got == want["pks"], f"{restored}: {len(got)} pks, want {len(want['pks'])}; missing {missing}, extra {extra}"
    sample = want["pks"][:15] + want["pks"][-15:]
    assert _rows(target, restored, sample) == _rows(target, source, sample), f"{restored}: rows differ from {source}"


def schema_of(target, name: str) -> dict:
    """DescribeCollection with ids and names aside, plus the partition count."""
    from pymilvus.grpc_gen import milvus_pb2

    desc = describe(target, name)
    parts = target.call("ShowPartitions", milvus_pb2.ShowPartitionsRequest(collection_name=name))
    fields = [
        {
            "name": f.name,
            "data_type": int(f.data_type),
            "type_params": sorted((kv.key, kv.value) for kv in f.type_params),
            "index_params": sorted((kv.key, kv.value) for kv in f.index_params),
            "is_primary_key": f.is_primary_key,
            "autoID": f.autoID,
            "is_partition_key": f.is_partition_key,
            "is_dynamic": f.is_dynamic,
            "element_type": int(f.element_type),
            "description": f.description,
            "default_value": f.default_value.SerializeToString() if f.HasField("default_value") else None,
        }
        for f in desc.schema.fields
    ]
    partition_key = any(f["is_partition_key"] for f in fields)
    return {
        "description": desc.schema.description,
        "autoID": desc.schema.autoID,
        "enable_dynamic_field": desc.schema.enable_dynamic_field,
        "fields": fields,
        "shards_num": desc.shards_num,
        "consistency_level": int(desc.consistency_level),
        "num_partitions": desc.num_partitions,
        "partitions": len(parts.partition_names),
        # Partition-key partitions are named by Milvus; others must come back by name.
        "partition_names": None if partition_key else sorted(parts.partition_names),
    }


def _rows_in_report(report) -> tuple[set, set]:
    """Every expected_rows.inserted and imported_rows the report's jobs carry."""
    expected, imported = set(), set()
    for job in (report or {}).get("jobs", []):
        if job.get("expected_rows"):
            expected.add(job["expected_rows"].get("inserted"))
        expected.add(job.get("rows"))
        for state in job.get("states", []):
            if state.get("imported_rows") is not None:
                imported.add(state["imported_rows"])
    return expected, imported


def _make_existing(target, name: str, rows: int = 3) -> None:
    """A collection of another schema, with a few rows, where a restore would write."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema

    schema = CollectionSchema(
        [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("emb", DataType.FLOAT_VECTOR, dim=2)],
        description="in the way",
    )
    coll = Collection(name, schema, using=target.connect())
    coll.insert([list(range(rows)), [[0.1, 0.2]] * rows])
    coll.flush()


# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_backup(backups):
    backups.get(FULL)
    return backups.expected(FULL)


@pytest.fixture(scope="module")
def restored_full(milvus, target, full_backup, tmp_path_factory):
    """One lockstep restore of the whole backup with suffix _r, shared by the tests that read it."""
    result = Lockstep(milvus, tmp_path_factory.mktemp("lockstep-full")).run("full_r", FULL, {"suffix": "_r"})
    return result


def test_milvus_own_v1_import_restores_the_backup(target, backups, full_backup):
    """The yardstick, no lockstep: each segment's group directory imports with Milvus's own v1
    Import (backup=true) and gives back every surviving row."""
    results = reference_import.restore(target, backups.made[FULL], "_v1")
    for source, segments in results.items():
        for segment, (state, rows, reason) in segments.items():
            want = full_backup["segments"][str(segment)]
            assert state == "ImportCompleted", (segment, reason)
            # Milvus 2.3 counts an import's rows after the segment's own deletes.
            assert rows == want["rows_after_deletes"], (segment, rows, want)
        assert_restored(target, source, source + "_v1", full_backup)
        assert schema_of(target, source + "_v1") == schema_of(target, source)


def test_no_strategy_restores_every_row_of_every_collection(target, full_backup, restored_full):
    assert restored_full.code == 0, str(restored_full)
    assert restored_full.report is not None, str(restored_full)
    for source in full_backup["collections"]:
        assert_restored(target, source, source + "_r", full_backup)


def test_a_snapshot_bundle_of_the_servers_binlogs_restores_every_row(target, backups, full_backup, lockstep):
    """The same backup as milvus-backup 0.6 writes it of a 3.0 cluster: read from its bundles,
    staged from them, imported by the route 2.3 has, every row and key counted."""
    source = backups.get(FULL)
    make_snapshot.convert(source, source.parent / "full_snap")
    result = lockstep.run("snapshot", "full_snap", {"suffix": "_s"})
    assert result.code == 0, str(result)
    assert result.report["format"] == "snapshot", str(result)
    assert result.report["staging"]["files"] > 0, "a bundle is staged, never imported in place"
    for name in full_backup["collections"]:
        assert_restored(target, name, name + "_s", full_backup)
        assert schema_of(target, name + "_s") == schema_of(target, name)


def test_restored_schema_equals_the_source(target, full_backup, restored_full):
    assert restored_full.code == 0, str(restored_full)
    for source in full_backup["collections"]:
        assert schema_of(target, source + "_r") == schema_of(target, source)


def test_meta_only_creates_the_collections_without_rows(target, full_backup, lockstep):
    result = lockstep.run("meta_only", FULL, {"suffix": "_m", "meta_only": True})
    assert result.code == 0, str(result)
    for source in full_backup["collections"]:
        assert schema_of(target, source + "_m") == schema_of(target, source)
        assert count_rows(target, source + "_m") == 0


def test_rename_restores_under_the_new_name(target, backups, lockstep):
    backups.get("strs_bak", ["src_strs"])
    expected = backups.expected("strs_bak")
    new = "renamed_strs"
    before = _collections(target)
    result = lockstep.run("rename", "strs_bak", {"rename": [f"default.src_strs:default.{new}"]})
    assert result.code == 0, str(result)
    assert _collections(target) - before == {new}
    assert_restored(target, "src_strs", new, expected)
    assert schema_of(target, new) == schema_of(target, "src_strs")


@pytest.mark.parametrize("form", ["v2", "v1"])
def test_the_seeds_line_restores_every_row_and_key_on_milvus_backups_own_config(target, full_backup, lockstep, form):
    """Issue 29: `lockstep restore -n NAME -s SUFFIX` in a directory with nothing but
    milvus-backup's backup.yaml (local provider): its v2 form with the credentials in the
    file, and its v1 (0.5) form with them only in milvus-backup's variables. (2.3.5 runs
    without authorization and takes the token without checking it.)"""
    suffix = f"_mb{form}"
    env = {} if form == "v2" else {"MILVUS_USER": "root", "MILVUS_PASSWORD": "Milvus"}
    result = lockstep.restore_as_milvus_backup(f"mb-{form}", form, ["-n", FULL, "-s", suffix], env)
    assert result.code == 0, str(result)
    assert result.report["ends"][0]["name"] == "milvus", result.report["ends"]
    if form == "v1":
        assert "a v1 milvus-backup config" in result.stderr, result.stderr[-2000:]
    for source in full_backup["collections"]:
        assert_restored(target, source, source + suffix, full_backup)


def test_deletes_moved_into_l0_segments_are_folded_and_every_row_and_key_restores(target, backups, lockstep):
    """Issue 27: a backup of this server's binlogs whose deletes sit in L0 (delete-only)
    segment entries, as Milvus 2.4 and later write them. 2.3.5 has no L0 import, so only
    folding can restore it: each data segment's import gets the L0 deletes of its keys as a
    delta log that lockstep wrote into the stage, and no L0 job is sent."""
    name = "l0_bak"
    backups.get(name, deletes_to_l0=True)
    expected = backups.expected(name)
    assert expected["l0_segments"], "the backup has no L0 segment to fold"
    result = lockstep.run("l0", name, {"suffix": "_l0"})
    assert result.code == 0, str(result)
    assert result.report["staging"]["transfers"].get("written", 0) > 0, result.report["staging"]
    for source, want in expected["collections"].items():
        assert_restored(target, source, source + "_l0", expected)
        figures = next(c for c in result.report["collections"] if c["target"] == f"default.{source}_l0")
        assert (figures["inserted"], figures["live"]) == (want["inserted"], want["rows"]), figures
        assert figures["imported"] == {"real": want["rows"]}, figures


def test_verify_counts_what_a_query_sees_and_finds_a_collection_changed_after_the_restore(
    target, backups, lockstep
):
    """Issue 27: `lockstep verify ID` asks the server count(*) of each restored collection
    against the live rows read from the backup's data. It loads what is not loaded (and
    releases it again), and a row written after the restore is a mismatch, exit 3."""
    from pymilvus import Collection, utility

    backups.get("verified_bak", ["src_ints"])
    expected = backups.expected("verified_bak")
    result = lockstep.run("verified", "verified_bak", {"suffix": "_v"})
    assert result.code == 0, str(result)
    restored = "src_ints_v"
    # Milvus loads a collection only with a vector index: made here, then released, so that
    # verify has to load it itself.
    coll = ensure_index_and_load(target, restored)
    coll.release()
    verify = lockstep.verify("verified", result.report["restore_id"])
    assert verify.code == 0, str(verify)
    want = expected["collections"]["src_ints"]["rows"]
    [shown] = verify.report["shown"]
    assert (shown["end"], shown["shows"], shown["live"]) == ("real", want, want), shown
    state = utility.load_state(restored, using=target.connect())
    assert "NotLoad" in str(state), f"verify left {restored} {state}"

    new_pk = max(expected["collections"]["src_ints"]["pks"]) + 1
    Collection(restored, using=target.connect()).insert(make_backup._rows("ints", [new_pk], random.Random(1)))
    changed = lockstep.verify("verified", result.report["restore_id"])
    assert changed.code == 3, str(changed)
    [shown] = changed.report["shown"]
    assert shown["shows"] == shown["live"] + 1, shown


def test_the_restore_verifies_itself_with_a_query_on_the_real_server(target, backups, lockstep):
    """Issue 27: with the indexes rebuilt, the restore itself loads what it restored, asks
    count(*) with strong consistency once every end completed, holds it to the live rows of
    the backup's data, and releases what it loaded."""
    from pymilvus import utility

    backups.get("selfcheck_bak", ["src_ints"])
    expected = backups.expected("selfcheck_bak")
    result = lockstep.run("selfcheck", "selfcheck_bak", {"suffix": "_sv", "rebuild_index": True})
    assert result.code == 0, str(result)
    want = expected["collections"]["src_ints"]["rows"]
    [shown] = result.report["verification"]["shown"]
    assert (shown["end"], shown["shows"], shown["live"], shown["unverifiable"]) == ("real", want, want, None), shown
    state = utility.load_state("src_ints_sv", using=target.connect())
    assert "NotLoad" in str(state), f"the restore left src_ints_sv {state}"
    assert_restored(target, "src_ints", "src_ints_sv", expected)


def test_the_restore_compares_a_sample_of_rows_field_by_field_on_the_real_server(target, backups, lockstep):
    """Issue 27: with `rows = "sample"`, the sampled keys are fetched from the server with
    every field and held to the rows the backup's binlogs hold: every scalar type, JSON, the
    dynamic field, float and binary vectors, Int64 and VarChar keys. A sample of 10,000 keys
    takes every key here, so every live row is compared and every deleted key is held
    absent."""
    backups.get("sampled_bak", ["src_ints", "src_strs"])
    expected = backups.expected("sampled_bak")
    result = lockstep.run(
        "sampled",
        "sampled_bak",
        {"suffix": "_sm", "rebuild_index": True},
        extra='[verify]\nrows = "sample"\nsample = 10000\n',
    )
    assert result.code == 0, str(result)
    shown = result.report["verification"]["shown"]
    assert len(shown) == 2, shown
    for s in shown:
        source = s["collection"].removeprefix("default.").removesuffix("_sm")
        want = expected["collections"][source]
        assert s["unverifiable"] is None, s
        assert s["sample"]["differences"] == 0, s
        assert s["sample"]["rows"] == want["rows"] == s["live"], s
        assert s["sample"]["absent"] > 0, s


def test_a_partition_key_collection_is_verified_whole_and_by_sample_on_the_real_server(target, backups, lockstep):
    """Issue 49: 2.3.5 refuses a count(*) that names partitions of a partition-key collection
    ("not support manually specifying the partition names if partition key mode is used"),
    so a verification that counted each partition ended "cannot verify" and exit 0. Counted
    as a whole and sampled by key alone, the collection is verified, in the restore and by
    `lockstep verify ID` afterwards."""
    backups.get("pkey_bak", ["src_pkey"])
    expected = backups.expected("pkey_bak")
    want = expected["collections"]["src_pkey"]
    result = lockstep.run(
        "pkey",
        "pkey_bak",
        {"suffix": "_pk", "rebuild_index": True},
        extra='[verify]\nrows = "sample"\n',
    )
    assert result.code == 0, str(result)
    [shown] = result.report["verification"]["shown"]
    assert shown["unverifiable"] is None, shown
    assert (shown["end"], shown["shows"], shown["live"]) == ("real", want["rows"], want["rows"]), shown
    assert shown["sample"]["differences"] == 0 and shown["sample"]["rows"] > 0, shown
    verify = lockstep.verify("pkey", result.report["restore_id"])
    assert verify.code == 0, str(verify)
    [again] = verify.report["shown"]
    assert (again["unverifiable"], again["shows"]) == (None, want["rows"]), again
    assert_restored(target, "src_pkey", "src_pkey_pk", expected)


def test_drop_exist_collection_replaces_an_existing_collection(target, backups, lockstep):
    backups.get("strs_bak", ["src_strs"])
    expected = backups.expected("strs_bak")
    _make_existing(target, "src_strs_d")
    result = lockstep.run("drop_exist", "strs_bak", {"suffix": "_d", "drop_exist_collection": True})
    assert result.code == 0, str(result)
    assert schema_of(target, "src_strs_d") == schema_of(target, "src_strs")
    assert_restored(target, "src_strs", "src_strs_d", expected)


def test_existing_collection_without_drop_or_skip_is_refused_and_nothing_is_written(target, full_backup, lockstep):
    _make_existing(target, "src_strs_x", rows=3)
    in_the_way = schema_of(target, "src_strs_x")
    before = _collections(target)
    result = lockstep.run("exists", FULL, {"suffix": "_x"})
    assert result.code == 2, str(result)
    assert "src_strs_x" in result.text(), f"the refusal should name the collection in the way: {result}"
    assert _collections(target) == before, "a refused restore created or dropped collections"
    assert schema_of(target, "src_strs_x") == in_the_way
    assert count_rows(target, "src_strs_x") == 3


@pytest.mark.parametrize(
    "which,by", [("first", 10), ("first-with-deletes", 50)], ids=["no-deletes", "uncounted-deletes"]
)
def test_meta_claiming_more_rows_than_a_segment_holds_is_refused_naming_the_segment(
    target, backups, lockstep, which, by
):
    """A segment's meta claims more rows than its binlogs hold. Issue 27's case is the one with
    delete logs whose deletes the meta does not count: its range let a short import pass.
    Preflight reads the rows from the data and refuses the backup before anything is written,
    naming the segment, what its binlogs hold and what its meta says."""
    name = f"inflated_{by}_bak"
    backups.get(name, ["src_ints"], inflate=(which, by))
    inflated = backups.expected(name)["inflated"]
    before = _collections(target)
    result = lockstep.run(f"inflated_{by}", name, {"suffix": f"_i{by}"})
    assert result.code == 2, f"want refused in preflight: {result}"
    assert "backup_rows" in (result.report or {}).get("refusal_kinds", []), str(result)
    text = result.text()
    assert (
        f"segment {inflated['segment']}): its binlogs hold {inflated['actual_rows']} rows, "
        f"its meta says {inflated['meta_rows']}"
    ) in text, str(result)
    assert _collections(target) == before, "a refused restore wrote a collection"


def test_backup_missing_a_segments_binlogs_is_refused_before_anything_is_written(target, backups, lockstep):
    backups.get("dropped_bak", ["src_ints"], drop_binlogs_of_one_segment=True)
    before = _collections(target)
    result = lockstep.run("dropped", "dropped_bak", {"suffix": "_b"})
    assert result.code == 2, f"want refused in preflight: {result}"
    dropped = backups.expected("dropped_bak")["dropped_binlogs"]
    text = result.text()
    assert f"segment {dropped['segment']}" in text and "the backup is incomplete" in text, (
        f"the refusal should name segment {dropped['segment']} and its missing binlogs: {result}"
    )
    assert _collections(target) == before, "a refused restore wrote a collection"


def test_merged_strategy_is_refused_on_2_3_naming_2_4(target, full_backup, lockstep):
    before = _collections(target)
    result = lockstep.run("merged", FULL, {"suffix": "_g"}, strategy="merged")
    assert result.code == 2, str(result)
    assert "2.4" in result.text(), str(result)
    assert _collections(target) == before
