"""Rewrites a backup make_backup.py wrote (the binlog format, from a real Milvus 2.3.5's own
binlogs) as the snapshot format milvus-backup 0.6 writes of a Milvus 3.0 cluster:

    {root}/{name}/meta/{backup_meta,full_meta}.json    format "snapshot"; each collection names
                                                       only its bundle's metadata
    {root}/{name}/bundle/exports/{uuid}/snapshots/{c}/metadata/{snapshot}.json    protojson
    {root}/{name}/bundle/exports/{uuid}/snapshots/{c}/manifests/{snapshot}/{seg}.avro
    {root}/{name}/bundle/exports/{uuid}/files/insert_log/{c}/{p}/{seg}/{field}/{log}
    {root}/{name}/bundle/exports/{uuid}/files/delta_log/{c}/{p}/{seg}/{log}
    {root}/{name}/expected.json                        the binlog backup's, unchanged

The data files are the same real binlogs, under their Milvus keys. Each manifest is one raw
Avro datum (no container header) of the format-2 schema in
`proto/proto/snapshot_manifest_v2.avsc`, the one lockstep's reader starts from; every path in
the bundle is its full key when exported, as Milvus writes them.

    python make_snapshot.py --from DIR --to DIR
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import pathlib
import shutil
import uuid

import fastavro

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = fastavro.parse_schema(json.loads((REPO / "proto" / "proto" / "snapshot_manifest_v2.avsc").read_text()))
FORMAT_VERSION = 2


def _names():
    from pymilvus.grpc_gen import common_pb2, schema_pb2

    return schema_pb2.DataType.Name, common_pb2.ConsistencyLevel.Name


def _default_value(encoded: str) -> dict | None:
    """milvus-backup's base64 protobuf ValueField as protojson (`{"int_data": 5}`)."""
    if not encoded:
        return None
    from google.protobuf import json_format
    from pymilvus.grpc_gen import schema_pb2

    value = schema_pb2.ValueField.FromString(base64.b64decode(encoded))
    return json_format.MessageToDict(value, preserving_proto_field_name=True)


def _files_by_log(src: pathlib.Path) -> dict[tuple[int, int], tuple[pathlib.Path, str]]:
    """Every object under the backup's binlogs/, by (segment, log id): where it is and its
    Milvus key (the backup's group directory taken out)."""
    found = {}
    for path in (src / "binlogs").rglob("*"):
        if not path.is_file():
            continue
        parts = path.relative_to(src / "binlogs").parts
        kind, rest = parts[0], parts[1:]
        if kind not in ("insert_log", "delta_log"):
            continue
        if kind == "insert_log":
            c, p, _group, s, field, log = rest
            key = f"insert_log/{c}/{p}/{s}/{field}/{log}"
        elif len(rest) == 5:
            c, p, _group, s, log = rest
            key = f"delta_log/{c}/{p}/{s}/{log}"
        else:
            c, p, s, log = rest
            key = f"delta_log/{c}/{p}/{s}/{log}"
        found[(int(s), int(log))] = (path, key)
    return found


def _log_records(field_binlogs: list, segment: int, keys: dict) -> list:
    return [
        {
            "field_id": fb.get("fieldID", 0),
            "binlogs": [
                {
                    "entries_num": b.get("entries_num", 0),
                    "timestamp_from": b.get("timestamp_from", 0),
                    "timestamp_to": b.get("timestamp_to", 0),
                    "log_path": keys[(segment, b["log_id"])],
                    "log_size": b.get("log_size", 0),
                    "log_id": b["log_id"],
                    "memory_size": b.get("log_size", 0),
                }
                for b in fb.get("binlogs", [])
            ],
        }
        for fb in field_binlogs
    ]


def _manifest(segment: dict, keys: dict) -> bytes:
    position = {"channel_name": segment.get("v_channel", ""), "msg_id": b"", "msg_group": "", "timestamp": 0}
    sid = segment["segment_id"]
    record = {
        "segment_id": sid,
        "partition_id": segment.get("partition_id", 0),
        # datapb.SegmentLevel: L0 = 1, L1 = 2.
        "segment_level": 1 if segment.get("is_l0") else 2,
        "channel_name": segment.get("v_channel", ""),
        "num_of_rows": segment.get("num_of_rows", 0),
        "start_position": position,
        "dml_position": position,
        "storage_version": segment.get("storage_version", 0),
        "is_sorted": False,
        "binlog_files": _log_records(segment.get("binlogs", []), sid, keys),
        "deltalog_files": _log_records(segment.get("deltalogs", []), sid, keys),
        "statslog_files": [],
        "bm25_statslog_files": [],
        "index_files": [],
        "text_index_files": [],
        "json_key_index_files": [],
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMA, record)
    return out.getvalue()


def _metadata(backup: dict, coll: dict, snapshot: int, manifests: list[str], segments: list[int]) -> dict:
    type_name, level_name = _names()
    schema = coll.get("schema", {})
    fields = []
    for f in schema.get("fields", []):
        field = {
            "fieldID": str(f["fieldID"]),
            "name": f["name"],
            "is_primary_key": f.get("is_primary_key", False),
            "description": f.get("description", ""),
            "data_type": type_name(f.get("data_type", 0)),
            "type_params": f.get("type_params", []),
            "autoID": f.get("autoID", False),
            "element_type": type_name(f.get("element_type", 0)),
            "is_dynamic": f.get("is_dynamic", False),
            "is_partition_key": f.get("is_partition_key", False),
            "nullable": f.get("nullable", False),
        }
        default = _default_value(f.get("default_value_base64", ""))
        if default is not None:
            field["default_value"] = default
        fields.append(field)
    ids = {f["name"]: f["fieldID"] for f in schema.get("fields", [])}
    indexes = []
    for index in coll.get("index_infos", []):
        params = [{"key": k, "value": v} for k, v in sorted(index.get("params", {}).items())]
        indexes.append(
            {
                "fieldID": str(ids[index["field_name"]]),
                "index_name": index["index_name"],
                "index_params": params,
                "user_index_params": params,
            }
        )
    return {
        "format_version": FORMAT_VERSION,
        "snapshot_info": {
            "name": f"mbk_{backup['name']}",
            "id": str(snapshot),
            "collection_id": str(coll["collection_id"]),
            "create_ts": str(coll.get("backup_timestamp", 0)),
        },
        "collection": {
            "schema": {
                "name": schema.get("name", ""),
                "description": schema.get("description", ""),
                "autoID": schema.get("autoID", False),
                "fields": fields,
                "enable_dynamic_field": schema.get("enable_dynamic_field", False),
            },
            "num_shards": str(coll.get("shards_num", 1)),
            "consistency_level": level_name(coll.get("consistency_level", 0)),
            "properties": coll.get("properties", []),
            "partitions": {p["partition_name"]: str(p["partition_id"]) for p in coll.get("partition_backups", [])},
            "virtual_channel_names": coll.get("virtual_channel_names", []),
        },
        "indexes": indexes,
        "manifest_list": manifests,
        "segment_ids": [str(s) for s in segments],
        "layout": "SnapshotLayoutSelfContained",
    }


def convert(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """Writes the snapshot-format twin of the binlog backup at `src` to `dst` (a sibling
    directory, so the backup name is its last part); returns `dst`. Leaves nothing behind on
    failure."""
    if dst.exists():
        raise RuntimeError(f"{dst} exists already")
    try:
        return _convert(src, dst)
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        raise


def _convert(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    full = json.loads((src / "meta" / "full_meta.json").read_text())
    # The bundle's keys when exported: under the backup, as milvus-backup has Milvus write them.
    exported_root = f"{dst.parent.name}/{dst.name}"
    files = _files_by_log(src)
    collections = []
    for coll in full.get("collection_backups", []):
        c = coll["collection_id"]
        snapshot = c + 1_000_000
        bundle = f"bundle/exports/{uuid.UUID(int=c)}"
        keys = {}
        for (segment, log), (path, key) in files.items():
            if key.split("/")[1] != str(c):
                continue
            target = dst / bundle / "files" / key
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            keys[(segment, log)] = f"{exported_root}/{bundle}/files/{key}"
        segments = [s for p in coll.get("partition_backups", []) for s in p.get("segment_backups", [])]
        segments += coll.get("l0_segments", [])
        manifests = []
        for segment in segments:
            relative = f"{bundle}/snapshots/{c}/manifests/{snapshot}/{segment['segment_id']}.avro"
            (dst / relative).parent.mkdir(parents=True, exist_ok=True)
            (dst / relative).write_bytes(_manifest(segment, keys))
            manifests.append(f"{exported_root}/{relative}")
        metadata_path = f"{bundle}/snapshots/{c}/metadata/{snapshot}.json"
        (dst / metadata_path).parent.mkdir(parents=True, exist_ok=True)
        metadata = _metadata(full, coll, snapshot, manifests, [s["segment_id"] for s in segments])
        (dst / metadata_path).write_text(json.dumps(metadata, indent=2))
        collections.append(
            {
                key: coll[key]
                for key in ("id", "collection_id", "db_name", "collection_name", "db_id", "backup_timestamp", "size")
                if key in coll
            }
            | {"snapshot_backup": {"metadata_path": metadata_path, "total_files": len(keys)}}
        )
    meta = dict(full, name=dst.name, format="snapshot", collection_backups=collections)
    (dst / "meta").mkdir(parents=True, exist_ok=True)
    (dst / "meta" / "full_meta.json").write_text(json.dumps(meta))
    (dst / "meta" / "backup_meta.json").write_text(json.dumps(dict(meta, collection_backups=[])))
    shutil.copyfile(src / "expected.json", dst / "expected.json")
    return dst


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="src", required=True, type=pathlib.Path)
    parser.add_argument("--to", dest="dst", required=True, type=pathlib.Path)
    args = parser.parse_args()
    print(convert(args.src, args.dst))
