"""Files written by pymilvus's own LocalBulkWriter, imported into milvus-sim through pymilvus's
`bulk_import` REST helper: Parquet (the writer's default) and JSON row files, several of them
(a small chunk_size makes the writer flush more than once), one file group per file as Milvus
wants for row-based files. The two-phase job of the CDC guide runs on the primary; on both the
primary and the standby the job must count exactly the rows the writer wrote, per group and in
total, and import them all once committed."""

import itertools
import json
import pathlib

import pyarrow.parquet
from pymilvus import DataType, MilvusClient
from pymilvus.bulk_writer import BulkFileType, LocalBulkWriter, bulk_import

ROWS = 1000
DIM = 8
# The writer flushes a file whenever its buffer passes chunk_size bytes; a row here is about
# 70 bytes (8 for the pk, 32 for the vector, the title and the JSON), so 16 KB gives 4-5 files.
CHUNK_SIZE = 16 * 1024

_names = itertools.count()


def schema():
    schema = MilvusClient.create_schema(enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("title", DataType.VARCHAR, max_length=64)
    schema.add_field("meta", DataType.JSON)
    return schema


def write_rows(local_path, file_type):
    """Appends ROWS rows with LocalBulkWriter and returns the files it wrote, as its
    batch_files reports them (one list per flush)."""
    with LocalBulkWriter(
        schema=schema(), local_path=str(local_path), chunk_size=CHUNK_SIZE, file_type=file_type
    ) as writer:
        for i in range(ROWS):
            writer.append_row({
                "id": i,
                "vector": [float(i % 7) / 7] * DIM,
                "title": f"title-{i}",
                "meta": {"n": i, "even": i % 2 == 0},
            })
        writer.commit()
        assert writer.total_row_count == ROWS
        return [[pathlib.Path(f) for f in batch] for batch in writer.batch_files]


def rows_in(path):
    """The rows pymilvus put in one of its files, read back from the file itself."""
    if path.suffix == ".parquet":
        return pyarrow.parquet.read_metadata(path).num_rows
    # pymilvus's JSON row file is Milvus's `{"rows": [...]}`.
    content = json.loads(path.read_text())
    assert list(content) == ["rows"]
    return len(content["rows"])


def import_written_files(sim, tmp_path, file_type, suffix):
    local_path = tmp_path / "writer"
    batches = write_rows(local_path, file_type)

    # Row-based files go one per group; a count per file that depends on when the writer's
    # flush thread swapped its buffer is read back from the files, not assumed.
    assert len(batches) > 1, batches
    assert all(len(batch) == 1 for batch in batches), batches
    files = [batch[0] for batch in batches]
    assert all(f.suffix == suffix and f.stat().st_size > 0 for f in files), files
    per_file = [rows_in(f) for f in files]
    assert all(n > 0 for n in per_file), per_file
    assert sum(per_file) == ROWS

    # The CDC guide uploads the same files to both clusters' storage, at the same path, and
    # the job names them relative to the bucket.
    prefix = f"bulk_writer_{next(_names)}"
    names = [f"{prefix}/{f.relative_to(local_path).as_posix()}" for f in files]
    for name, f in zip(names, files):
        sim.write_file(name, f.read_bytes())

    collection = f"bulk_{prefix}"
    sim.create_collection(collection, schema=schema())
    answer = bulk_import(
        url=sim.uris["a"],
        collection_name=collection,
        files=[[name] for name in names],
        options={"auto_commit": "false"},
    ).json()
    assert answer["code"] == 0, answer
    job_id = answer["data"]["jobId"]

    sim.wait_state(job_id, "Uncommitted")
    for cluster in ("a", "b"):
        data = sim.progress(cluster, job_id)
        assert (data["progress"], data["totalRows"]) == (99, ROWS), (cluster, data)
        assert data["fileSize"] == sum(f.stat().st_size for f in files), (cluster, data)
        groups = [(d["fileName"], d["fileSize"], d["totalRows"]) for d in data["details"]]
        assert groups == [
            (f"[{name}]", f.stat().st_size, n) for name, f, n in zip(names, files, per_file)
        ], cluster

    # Committed once on the primary; the standby's mirror completes with the same rows.
    commit = sim.rest("a", "commit", {"jobId": job_id})
    assert commit == {"code": 0, "data": {}}
    sim.wait_state(job_id, "Completed")
    for cluster in ("a", "b"):
        data = sim.progress(cluster, job_id)
        assert (data["progress"], data["importedRows"], data["totalRows"]) == (100, ROWS, ROWS)
        assert [d["importedRows"] for d in data["details"]] == per_file, cluster


def test_parquet_files_from_the_bulk_writer(sim, tmp_path):
    import_written_files(sim, tmp_path, BulkFileType.PARQUET, ".parquet")


def test_json_files_from_the_bulk_writer(sim, tmp_path):
    import_written_files(sim, tmp_path, BulkFileType.JSON, ".json")
