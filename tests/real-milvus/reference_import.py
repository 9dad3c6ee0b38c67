"""Restores a backup written by make_backup.py with Milvus 2.3's own v1 binlog import, without
lockstep: the yardstick the suite holds lockstep's restore against, and the proof that a
backup's binlogs import at all.

What it does is milvus-backup's normal v1 restore in small: create the collection from the
backup's schema (CreateCollection with the backup's shards, consistency level and, for a
partition key, its partition count), create the partitions, then one gRPC `Import` per
segment with `files = [insert_dir, delta_dir or ""]` and option `backup=true`. pymilvus 2.3's
`utility.do_bulk_insert` keeps only the `bucket` option, so the request is built by hand. With
local storage the directories are absolute paths under `localStorage.path`.
"""

from __future__ import annotations

import json
import pathlib
import time

from make_backup import Target

IMPORT_TIMEOUT = 300.0
IMPORT_COMPLETED = 6
IMPORT_FAILED = (1, 7)


def _schema_proto(schema_json: dict, name: str):
    from pymilvus.grpc_gen import common_pb2, schema_pb2

    schema = schema_pb2.CollectionSchema(
        name=name,
        description=schema_json.get("description", ""),
        autoID=schema_json.get("autoID", False),
        enable_dynamic_field=schema_json.get("enable_dynamic_field", False),
    )
    for f in schema_json.get("fields", []):
        schema.fields.append(
            schema_pb2.FieldSchema(
                fieldID=f.get("fieldID", 0),
                name=f["name"],
                is_primary_key=f.get("is_primary_key", False),
                description=f.get("description", ""),
                data_type=f.get("data_type", 0),
                type_params=[common_pb2.KeyValuePair(**kv) for kv in f.get("type_params", [])],
                index_params=[common_pb2.KeyValuePair(**kv) for kv in f.get("index_params", [])],
                autoID=f.get("autoID", False),
                is_dynamic=f.get("is_dynamic", False),
                is_partition_key=f.get("is_partition_key", False),
            )
        )
    return schema


def restore_collection(target: Target, backup_dir: pathlib.Path, coll: dict, name: str, log=print) -> dict:
    """Restores one collection of the backup as `name`; returns {segment id: (state, rows)}."""
    from pymilvus.grpc_gen import common_pb2, milvus_pb2

    schema = coll["schema"]
    partition_key = any(f.get("is_partition_key") for f in schema.get("fields", []))
    target.call(
        "CreateCollection",
        milvus_pb2.CreateCollectionRequest(
            collection_name=name,
            schema=_schema_proto(schema, name).SerializeToString(),
            shards_num=coll.get("shards_num", 1),
            consistency_level=coll.get("consistency_level", 0),
            num_partitions=len(coll["partition_backups"]) if partition_key else 0,
        ),
    )
    if not partition_key:
        for part in coll["partition_backups"]:
            if part["partition_name"] != "_default":
                target.call(
                    "CreatePartition",
                    milvus_pb2.CreatePartitionRequest(collection_name=name, partition_name=part["partition_name"]),
                )
    tasks = {}
    c = coll["collection_id"]
    for part in coll["partition_backups"]:
        p = part["partition_id"]
        for seg in part.get("segment_backups", []):
            g = seg.get("group_id") or seg["segment_id"]
            insert_dir = backup_dir / "binlogs" / "insert_log" / str(c) / str(p) / str(g)
            delta_dir = backup_dir / "binlogs" / "delta_log" / str(c) / str(p) / str(g)
            files = [f"{insert_dir}/", f"{delta_dir}/" if delta_dir.is_dir() else ""]
            response = target.call(
                "Import",
                milvus_pb2.ImportRequest(
                    collection_name=name,
                    partition_name=part["partition_name"],
                    files=files,
                    options=[
                        common_pb2.KeyValuePair(key="backup", value="true"),
                        common_pb2.KeyValuePair(key="skip_disk_quota_check", value="true"),
                    ],
                ),
            )
            tasks[seg["segment_id"]] = response.tasks[0]
    results = {}
    deadline = time.monotonic() + IMPORT_TIMEOUT
    pending = dict(tasks)
    while pending:
        for seg_id, task in list(pending.items()):
            state = target.call("GetImportState", milvus_pb2.GetImportStateRequest(task=task))
            if state.state == IMPORT_COMPLETED or state.state in IMPORT_FAILED:
                reason = {kv.key: kv.value for kv in state.infos}.get("failed_reason", "")
                results[seg_id] = (common_pb2.ImportState.Name(state.state), state.row_count, reason)
                del pending[seg_id]
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"{name}: imports of segments {sorted(pending)} did not finish")
        if pending:
            time.sleep(1)
    log(f"{name}: {len(results)} v1 imports: {json.dumps({str(k): v for k, v in results.items()})}")
    return results


def restore(target: Target, backup_dir: pathlib.Path, suffix: str, log=print) -> dict:
    full = json.loads((backup_dir / "meta" / "full_meta.json").read_text())
    return {
        coll["collection_name"]: restore_collection(target, backup_dir, coll, coll["collection_name"] + suffix, log)
        for coll in full["collection_backups"]
    }
