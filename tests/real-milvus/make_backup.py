"""Makes backups in milvus-backup's layout from a real Milvus 2.3.5's own binlogs.

`populate` creates the source collections (int64 and varchar primary keys, float and binary
vectors, JSON, a dynamic field, a partition-key collection, several partitions, several
segments per partition, deletes), inserting, deleting and flushing so that every partition
has several flushed segments. `write_backup` then writes

    {root}/{name}/meta/{backup_meta,collection_meta,partition_meta,segment_meta,full_meta}.json
    {root}/{name}/binlogs/insert_log/{c}/{p}/{group}/{seg}/{field}/{log}
    {root}/{name}/binlogs/delta_log/{c}/{p}/{group}/{seg}/{log}          (group = segment id)
    {root}/{name}/expected.json       beside meta/ and binlogs/ (not part of milvus-backup's layout)

Where the segment meta comes from (2.3.5 has no API that returns a segment's binlogs):
- which segments exist, their state and row counts: the gRPC GetPersistentSegmentInfo;
- each segment's insert, delta and stats logs (log ids, sizes, entries_num, timestamps) and its
  vchannel: etcd, under `{etcd.rootPath}/meta/datacoord-meta/{s,binlog,deltalog,statslog}/
  {c}/{p}/{seg}[/{field}]`, where datacoord keeps them as protobuf (datapb.SegmentInfo,
  datapb.FieldBinlog; 2.3 stores log ids there, not paths);
- the objects themselves: the server's local storage (`localStorage.path`), at
  `insert_log/{c}/{p}/{seg}/{field}/{log_id}` and `delta_log/{c}/{p}/{seg}/{log_id}`. Every
  object etcd names must exist there with the size etcd gives, and nothing else may be there.
- cross-checks read the copied binlogs themselves (binlog.py): each insert log holds the
  segment's num_of_rows, each delta log as many deletes as its entries_num.

The meta follows milvus-backup's Go `encoding/json` shape (proto field names as keys, zero
values omitted, enums as integers). Beyond what milvus-backup writes for a 2.3 server (which
lists files and leaves entries_num 0), each Binlog carries entries_num and timestamp_from/to
from etcd, and each segment its v_channel.

    python make_backup.py --data DIR --name NAME [--populate] [--prefix src]
        [--collections a,b] [--inflate-rows SEGMENT_OR_FIRST:10] [--drop-binlogs-of-one-segment]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import random
import shutil
import sys
import time
import urllib.request
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import binlog  # noqa: E402
from server import etcd_url, parse_milvus_yaml  # noqa: E402

FLUSH_SETTLE_TIMEOUT = 60.0
INDEX_TIMEOUT = 120.0

# ---------------------------------------------------------------------------------------
# etcd (its JSON gateway, so that nothing beyond the standard library is needed)


def etcd_range(url: str, prefix: str, timeout: float = 10.0) -> list[tuple[str, bytes]]:
    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    body = json.dumps(
        {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()}
    ).encode()
    request = urllib.request.Request(f"{url}/v3/kv/range", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        answer = json.loads(resp.read().decode())
    return [
        (base64.b64decode(kv["key"]).decode(), base64.b64decode(kv.get("value", "")))
        for kv in answer.get("kvs", [])
    ]


# ---------------------------------------------------------------------------------------
# protobuf wire format, for the few datapb messages read from etcd


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def proto_fields(buf: bytes) -> dict[int, list]:
    """field number -> values (ints for varints and fixed, bytes for length-delimited)."""
    fields: dict[int, list] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value = buf[pos : pos + length]
            pos += length
        elif wire == 5:
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _one(fields: dict, number: int, default=0):
    return fields.get(number, [default])[-1]


def decode_binlog(buf: bytes) -> dict:
    """datapb.Binlog: entries_num=1 timestamp_from=2 timestamp_to=3 log_path=4 log_size=5
    log_id=6."""
    f = proto_fields(buf)
    return {
        "entries_num": _int64(_one(f, 1)),
        "timestamp_from": _one(f, 2),
        "timestamp_to": _one(f, 3),
        "log_path": _one(f, 4, b"").decode(),
        "log_size": _int64(_one(f, 5)),
        "log_id": _int64(_one(f, 6)),
    }


def decode_field_binlog(buf: bytes) -> dict:
    """datapb.FieldBinlog: fieldID=1 binlogs=2."""
    f = proto_fields(buf)
    return {"fieldID": _int64(_one(f, 1)), "binlogs": [decode_binlog(b) for b in f.get(2, [])]}


def decode_segment_info(buf: bytes) -> dict:
    """datapb.SegmentInfo: ID=1 collectionID=2 partitionID=3 insert_channel=4 num_of_rows=5
    state=6 ... binlogs=11 statslogs=12 deltalogs=13 (empty in 2.3.5's etcd: kept apart)."""
    f = proto_fields(buf)
    return {
        "id": _int64(_one(f, 1)),
        "collection_id": _int64(_one(f, 2)),
        "partition_id": _int64(_one(f, 3)),
        "insert_channel": _one(f, 4, b"").decode(),
        "num_of_rows": _int64(_one(f, 5)),
        "state": _one(f, 6),
        "binlogs": [decode_field_binlog(b) for b in f.get(11, [])],
        "statslogs": [decode_field_binlog(b) for b in f.get(12, [])],
        "deltalogs": [decode_field_binlog(b) for b in f.get(13, [])],
    }


def msg_position_timestamp(buf: bytes) -> int:
    """msgpb.MsgPosition: channel_name=1 msgID=2 msgGroup=3 timestamp=4."""
    return _one(proto_fields(buf), 4)


SEGMENT_FLUSHED = 4  # commonpb.SegmentState.Flushed


# ---------------------------------------------------------------------------------------
# the server


class Target:
    """What make_backup needs of a running server: its gRPC address, its storage directory
    and its etcd meta prefix; from a server.MilvusServer or from its DIR/configs/milvus.yaml."""

    def __init__(self, host: str, port: int, storage_dir: pathlib.Path, etcd: str, meta_root: str):
        self.host, self.port = host, port
        self.storage_dir = pathlib.Path(storage_dir)
        self.etcd = etcd.rstrip("/")
        self.meta_root = meta_root
        self._stub = None
        self.alias = f"mb-{uuid.uuid4().hex[:8]}"
        self._connected = False

    @classmethod
    def from_server(cls, server) -> "Target":
        return cls(server.host, server.proxy_port, server.storage_dir, server.etcd, server.meta_root)

    @classmethod
    def from_data_dir(cls, data_dir, etcd: str | None = None) -> "Target":
        data_dir = pathlib.Path(data_dir)
        config = parse_milvus_yaml((data_dir / "configs" / "milvus.yaml").read_text())
        meta_root = f"{config['etcd.rootPath']}/{config.get('etcd.metaSubPath', 'meta')}"
        return cls(
            "127.0.0.1",
            int(config["proxy.port"]),
            pathlib.Path(config.get("localStorage.path", data_dir / "data")),
            etcd or etcd_url(),
            meta_root,
        )

    def connect(self) -> str:
        from pymilvus import connections

        if not self._connected:
            connections.connect(alias=self.alias, host=self.host, port=str(self.port), timeout=10)
            self._connected = True
        return self.alias

    @property
    def stub(self):
        if self._stub is None:
            import grpc
            from pymilvus.grpc_gen import milvus_pb2_grpc

            channel = grpc.insecure_channel(f"{self.host}:{self.port}")
            self._stub = milvus_pb2_grpc.MilvusServiceStub(channel)
        return self._stub

    def call(self, method: str, request, timeout: float = 30.0):
        response = getattr(self.stub, method)(request, timeout=timeout)
        status = getattr(response, "status", None)
        if status is not None and (status.error_code != 0 or getattr(status, "code", 0) != 0):
            raise RuntimeError(f"{method}: {status}")
        return response

    def etcd_meta(self, sub: str) -> list[tuple[str, bytes]]:
        return etcd_range(self.etcd, f"{self.meta_root}/{sub}")


# ---------------------------------------------------------------------------------------
# source collections


def _rng(seed: str) -> random.Random:
    return random.Random(seed)


def _float_vec(rng: random.Random, dim: int) -> list[float]:
    return [rng.random() for _ in range(dim)]


def _bin_vec(rng: random.Random, dim: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(dim // 8))


class Source:
    """One source collection: how to create it, the rounds of inserts and deletes, and the
    primary keys it holds afterwards (kept here, checked against the server and the binlogs)."""

    def __init__(self, name: str, kind: str):
        self.name = name
        self.kind = kind
        self.inserted: list = []
        self.deleted: set = set()
        self.partitions: dict[str, list] = {}

    @property
    def pk_field(self) -> str:
        return "pk"

    @property
    def surviving(self) -> list:
        return sorted(pk for pk in self.inserted if pk not in self.deleted)


def _schema(kind: str):
    from pymilvus import CollectionSchema, DataType, FieldSchema

    if kind == "ints":
        fields = [
            FieldSchema("pk", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=8),
            FieldSchema("title", DataType.VARCHAR, max_length=64),
            FieldSchema("doc", DataType.JSON),
            FieldSchema("flag", DataType.BOOL),
            FieldSchema("i8", DataType.INT8),
            FieldSchema("i16", DataType.INT16),
            FieldSchema("i32", DataType.INT32),
            FieldSchema("f32", DataType.FLOAT),
            FieldSchema("f64", DataType.DOUBLE),
        ]
        return CollectionSchema(fields, description="int64 pk, JSON, dynamic", enable_dynamic_field=True)
    if kind == "strs":
        fields = [
            FieldSchema("pk", DataType.VARCHAR, is_primary=True, max_length=32),
            FieldSchema("bvec", DataType.BINARY_VECTOR, dim=32),
            FieldSchema("n", DataType.INT64),
        ]
        return CollectionSchema(fields, description="varchar pk, binary vector")
    if kind == "pkey":
        fields = [
            FieldSchema("pk", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4),
            FieldSchema("tenant", DataType.VARCHAR, max_length=32, is_partition_key=True),
            FieldSchema("attrs", DataType.JSON),
        ]
        return CollectionSchema(fields, description="partition key")
    raise ValueError(kind)


def _rows(kind: str, pks: list, rng: random.Random) -> list[dict]:
    rows = []
    for pk in pks:
        if kind == "ints":
            row = {
                "pk": pk,
                "vec": _float_vec(rng, 8),
                "title": f"title-{pk}",
                "doc": {"pk": pk, "tags": [pk % 3, pk % 5], "even": pk % 2 == 0},
                "flag": pk % 2 == 0,
                "i8": pk % 127,
                "i16": pk % 32000,
                "i32": pk * 7,
                "f32": pk / 4.0,
                "f64": pk / 3.0,
            }
            if pk % 3 == 0:
                row["color"] = ["red", "green", "blue"][pk % 9 // 3]  # dynamic field
            if pk % 4 == 0:
                row["score"] = pk * 1.5  # dynamic field
        elif kind == "strs":
            row = {"pk": pk, "bvec": _bin_vec(rng, 32), "n": int(pk.split("-")[1])}
        else:
            row = {
                "pk": pk,
                "vec": _float_vec(rng, 4),
                "tenant": f"tenant-{pk % 7}",
                "attrs": {"k": pk % 11},
            }
        rows.append(row)
    return rows


def _index_params(kind: str) -> tuple[str, dict]:
    if kind == "strs":
        return "bvec", {"index_type": "BIN_FLAT", "metric_type": "HAMMING", "params": {}}
    return "vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}}


VECTOR_INDEX = {kind: _index_params(kind) for kind in ("ints", "strs", "pkey")}


def _insert(coll, rows: list[dict], partition: str | None) -> None:
    for i in range(0, len(rows), 500):
        coll.insert(rows[i : i + 500], partition_name=partition)


def populate(target: Target, prefix: str = "src", verify: bool = True, log=print) -> list[Source]:
    """Creates `{prefix}_ints`, `{prefix}_strs` and `{prefix}_pkey` and fills them. Takes
    about a minute (each flush about 3 s). Fails if a collection of those names exists."""
    from pymilvus import Collection, utility

    alias = target.connect()
    sources = []
    started = time.monotonic()

    # ints: int64 pk, all scalar types, JSON, dynamic fields; _default, p1, p2; one shard.
    # Round 1 and 2 give every partition two segments; the deletes touch _default's and p1's
    # first segment, never p2's (a segment without delta logs); round 3 adds a third p1
    # segment whose own deletes land before its flush.
    src = Source(f"{prefix}_ints", "ints")
    if utility.has_collection(src.name, using=alias):
        raise RuntimeError(f"{src.name} exists already")
    coll = Collection(src.name, _schema("ints"), shards_num=1, using=alias)
    for p in ("p1", "p2"):
        coll.create_partition(p)
    rng = _rng(src.name)
    base = {"_default": 0, "p1": 100_000, "p2": 200_000}
    for rnd, count in ((0, 200), (1, 150)):
        for part, start in base.items():
            pks = list(range(start + rnd * 10_000, start + rnd * 10_000 + count))
            _insert(coll, _rows("ints", pks, rng), part)
            src.inserted += pks
            src.partitions.setdefault(part, []).extend(pks)
        coll.flush()
    deletes = list(range(0, 200, 9)) + list(range(10_000, 10_150, 13)) + list(range(100_000, 100_200, 17))
    coll.delete(f"pk in {deletes}")
    src.deleted.update(deletes)
    coll.flush()
    pks = list(range(120_000, 120_100))
    _insert(coll, _rows("ints", pks, rng), "p1")
    src.inserted += pks
    src.partitions["p1"].extend(pks)
    early = pks[::10]
    coll.delete(f"pk in {early}")
    src.deleted.update(early)
    coll.flush()
    sources.append(src)
    log(f"populate: {src.name} done at {time.monotonic() - started:.1f}s")

    # strs: varchar pk, binary vector; _default and pa; two shards (so a flush gives up to
    # two segments per partition).
    src = Source(f"{prefix}_strs", "strs")
    if utility.has_collection(src.name, using=alias):
        raise RuntimeError(f"{src.name} exists already")
    coll = Collection(src.name, _schema("strs"), shards_num=2, using=alias)
    coll.create_partition("pa")
    rng = _rng(src.name)
    for rnd, plan in enumerate(({"_default": 300, "pa": 300}, {"pa": 200, "_default": 100})):
        for part, count in plan.items():
            pks = [f"{part}-{rnd * 1000 + i}" for i in range(count)]
            _insert(coll, _rows("strs", pks, rng), part)
            src.inserted += pks
            src.partitions.setdefault(part, []).extend(pks)
        coll.flush()
    deletes = [pk for pk in src.inserted if int(pk.split("-")[1]) % 23 == 0]
    coll.delete("pk in [" + ",".join(json.dumps(pk) for pk in deletes) + "]")
    src.deleted.update(deletes)
    coll.flush()
    sources.append(src)
    log(f"populate: {src.name} done at {time.monotonic() - started:.1f}s")

    # pkey: a partition key (4 partitions), two rounds, deletes in both.
    src = Source(f"{prefix}_pkey", "pkey")
    if utility.has_collection(src.name, using=alias):
        raise RuntimeError(f"{src.name} exists already")
    coll = Collection(src.name, _schema("pkey"), shards_num=1, num_partitions=4, using=alias)
    rng = _rng(src.name)
    for rnd in range(2):
        pks = list(range(rnd * 1000, rnd * 1000 + 400))
        _insert(coll, _rows("pkey", pks, rng), None)
        src.inserted += pks
        coll.flush()
    deletes = list(range(0, 400, 29)) + list(range(1000, 1400, 31))
    coll.delete(f"pk in {deletes}")
    src.deleted.update(deletes)
    coll.flush()
    sources.append(src)
    log(f"populate: {src.name} done at {time.monotonic() - started:.1f}s")

    for src in sources:
        wait_deletes_flushed(target, src)
    if verify:
        for src in sources:
            n = count_rows(target, src.name, src.kind)
            if n != len(src.surviving):
                raise RuntimeError(f"{src.name}: count(*) is {n}, want {len(src.surviving)}")
        log(f"populate: counts verified at {time.monotonic() - started:.1f}s")
    return sources


def wait_deletes_flushed(target: Target, src: Source, timeout: float = FLUSH_SETTLE_TIMEOUT) -> None:
    """Flush returns once the segments are flushed; the delta logs of deletes on segments
    flushed before may be recorded a moment later. Waits until etcd counts at least as many
    delete entries as were deleted (false positives of the bloom filter may add more)."""
    coll_id = describe(target, src.name).collectionID
    deadline = time.monotonic() + timeout
    while True:
        entries = sum(
            b["entries_num"]
            for _, value in target.etcd_meta(f"datacoord-meta/deltalog/{coll_id}/")
            for b in decode_field_binlog(value)["binlogs"]
        )
        if entries >= len(src.deleted):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{src.name}: {entries} delete entries flushed, want {len(src.deleted)}")
        time.sleep(0.5)


def describe(target: Target, name: str):
    from pymilvus.grpc_gen import milvus_pb2

    return target.call("DescribeCollection", milvus_pb2.DescribeCollectionRequest(collection_name=name))


def ensure_index_and_load(target: Target, name: str, kind: str | None = None, timeout: float = INDEX_TIMEOUT):
    """Creates the vector index the suite uses (FLAT / BIN_FLAT) if missing and loads."""
    from pymilvus import Collection, DataType

    alias = target.connect()
    coll = Collection(name, using=alias)
    if not coll.indexes:
        vector = next(
            f for f in coll.schema.fields if f.dtype in (DataType.FLOAT_VECTOR, DataType.BINARY_VECTOR)
        )
        if vector.dtype == DataType.BINARY_VECTOR:
            params = {"index_type": "BIN_FLAT", "metric_type": "HAMMING", "params": {}}
        else:
            params = {"index_type": "FLAT", "metric_type": "L2", "params": {}}
        coll.create_index(vector.name, params, timeout=timeout)
    coll.load(timeout=timeout)
    return coll


def count_rows(target: Target, name: str, kind: str | None = None) -> int:
    coll = ensure_index_and_load(target, name, kind)
    result = coll.query(expr="", output_fields=["count(*)"], consistency_level="Strong", timeout=60)
    return int(result[0]["count(*)"])


def primary_keys(target: Target, name: str) -> list:
    """Every primary key of a loaded collection, sorted: queried by ranges of the key."""
    from pymilvus import DataType

    coll = ensure_index_and_load(target, name)
    pk = next(f for f in coll.schema.fields if f.is_primary)
    # A query with an expression and no limit returns every match (2.3 caps only limit+offset,
    # and a limited query returns any rows, not the lowest keys, so it cannot page).
    expr = f"{pk.name} >= -9223372036854775807" if pk.dtype == DataType.INT64 else f'{pk.name} >= ""'
    rows = coll.query(expr=expr, output_fields=[pk.name], consistency_level="Strong", timeout=120)
    found = [r[pk.name] for r in rows]
    if len(found) != len(set(found)):
        raise RuntimeError(f"{name}: query returned duplicate primary keys")
    return sorted(set(found))


# ---------------------------------------------------------------------------------------
# meta in milvus-backup's Go encoding/json shape


def omit_zero(value):
    """Go's omitempty over a tree: drops False, 0, "", None, [] and {} recursively."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = omit_zero(v)
            if v is None or v is False or v == 0 or v in ("", [], {}):
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [omit_zero(v) for v in value]
    return value


def _kv(pairs) -> list[dict]:
    return [{"key": p.key, "value": p.value} for p in pairs]


def _field_json(field) -> dict:
    default = ""
    if field.HasField("default_value"):
        default = base64.b64encode(field.default_value.SerializeToString()).decode()
    return {
        "fieldID": field.fieldID,
        "name": field.name,
        "is_primary_key": field.is_primary_key,
        "description": field.description,
        "data_type": int(field.data_type),
        "type_params": _kv(field.type_params),
        "index_params": _kv(field.index_params),
        "autoID": field.autoID,
        "element_type": int(getattr(field, "element_type", 0)),
        "is_dynamic": field.is_dynamic,
        "is_partition_key": field.is_partition_key,
        "nullable": getattr(field, "nullable", False),
        "default_value_base64": default,
    }


def _schema_json(schema) -> dict:
    return {
        "name": schema.name,
        "description": schema.description,
        "autoID": schema.autoID,
        "fields": [_field_json(f) for f in schema.fields],
        "enable_dynamic_field": schema.enable_dynamic_field,
    }


def _index_infos(target: Target, name: str) -> list[dict]:
    from pymilvus.grpc_gen import milvus_pb2

    response = target.stub.DescribeIndex(milvus_pb2.DescribeIndexRequest(collection_name=name), timeout=30)
    infos = []
    for index in response.index_descriptions:
        params = {p.key: p.value for p in index.params}
        infos.append(
            {
                "field_name": index.field_name,
                "index_name": index.index_name,
                "index_type": params.get("index_type", ""),
                "params": params,
            }
        )
    return infos


def _load_state(target: Target, name: str) -> str:
    from pymilvus import utility

    try:
        progress = utility.loading_progress(name, using=target.connect())
        percent = int(str(progress.get("loading_progress", "0")).rstrip("%"))
    except Exception:  # noqa: BLE001 - not loaded
        return "NotLoad"
    return "Loaded" if percent == 100 else "Loading" if percent else "NotLoad"


def segment_meta(target: Target, coll_id: int, part_id: int, seg_id: int) -> dict:
    """A flushed segment's SegmentInfo and its binlog, deltalog and statslog FieldBinlogs
    from etcd."""
    base = "datacoord-meta"
    key = f"{target.meta_root}/{base}/s/{coll_id}/{part_id}/{seg_id}"
    raw = next((v for k, v in target.etcd_meta(f"{base}/s/{coll_id}/{part_id}/{seg_id}") if k == key), None)
    if raw is None:
        raise RuntimeError(f"segment {seg_id}: no SegmentInfo in etcd under {target.meta_root}/{base}/s/")
    info = decode_segment_info(raw)
    for kind, key in (("binlogs", "binlog"), ("deltalogs", "deltalog"), ("statslogs", "statslog")):
        separate = [
            decode_field_binlog(value)
            for path, value in target.etcd_meta(f"{base}/{key}/{coll_id}/{part_id}/{seg_id}/")
        ]
        merged: dict[int, dict] = {fb["fieldID"]: fb for fb in info[kind]}
        for fb in separate:
            if fb["fieldID"] in merged:
                merged[fb["fieldID"]]["binlogs"] += fb["binlogs"]
            else:
                merged[fb["fieldID"]] = fb
        for fb in merged.values():
            fb["binlogs"].sort(key=lambda b: b["log_id"])
        # datacoord may keep a FieldBinlog without logs (seen for deltalogs of segments that
        # never had a delete, some time after their flush): not a log, left out.
        info[kind] = [merged[k] for k in sorted(merged) if merged[k]["binlogs"]]
    return info


def _files_under(path: pathlib.Path) -> dict[str, int]:
    if not path.is_dir():
        return {}
    return {str(p.relative_to(path)): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def collect(target: Target, name: str) -> dict:
    """Everything the backup of collection `name` needs, read from the server."""
    from pymilvus.grpc_gen import milvus_pb2

    desc = describe(target, name)
    coll_id = desc.collectionID
    parts = target.call("ShowPartitions", milvus_pb2.ShowPartitionsRequest(collection_name=name))
    partitions = list(zip(parts.partition_names, parts.partitionIDs))
    segs = target.call(
        "GetPersistentSegmentInfo", milvus_pb2.GetPersistentSegmentInfoRequest(collectionName=name)
    )
    segments = []
    for seg in sorted(segs.infos, key=lambda s: (s.partitionID, s.segmentID)):
        if seg.state != SEGMENT_FLUSHED:
            raise RuntimeError(f"{name}: segment {seg.segmentID} is in state {seg.state}, not Flushed (4): flush first")
        meta = segment_meta(target, coll_id, seg.partitionID, seg.segmentID)
        if meta["num_of_rows"] != seg.num_rows:
            raise RuntimeError(
                f"segment {seg.segmentID}: etcd says {meta['num_of_rows']} rows, GetPersistentSegmentInfo {seg.num_rows}"
            )
        # Every object etcd names must be on local storage, and nothing more. etcd's log_size
        # is the logs' in-memory size (e.g. 1600 for 200 int64s), not the object's: the meta
        # gets the object's size, as milvus-backup lists it.
        insert_dir = target.storage_dir / "insert_log" / str(coll_id) / str(seg.partitionID) / str(seg.segmentID)
        delta_dir = target.storage_dir / "delta_log" / str(coll_id) / str(seg.partitionID) / str(seg.segmentID)
        on_disk_insert = _files_under(insert_dir)
        on_disk_delta = _files_under(delta_dir)
        named_insert = {f"{fb['fieldID']}/{b['log_id']}" for fb in meta["binlogs"] for b in fb["binlogs"]}
        named_delta = {str(b["log_id"]) for fb in meta["deltalogs"] for b in fb["binlogs"]}
        if set(on_disk_insert) != named_insert:
            raise RuntimeError(f"segment {seg.segmentID}: insert logs on disk {sorted(on_disk_insert)} != etcd {sorted(named_insert)}")
        if set(on_disk_delta) != named_delta:
            raise RuntimeError(f"segment {seg.segmentID}: delta logs on disk {sorted(on_disk_delta)} != etcd {sorted(named_delta)}")
        for fb in meta["binlogs"]:
            for b in fb["binlogs"]:
                b["memory_size"] = b["log_size"]
                b["log_size"] = on_disk_insert[f"{fb['fieldID']}/{b['log_id']}"]
        for fb in meta["deltalogs"]:
            for b in fb["binlogs"]:
                b["memory_size"] = b["log_size"]
                b["log_size"] = on_disk_delta[str(b["log_id"])]
        segments.append(meta)
    # channel checkpoints, as milvus-backup keeps them from the flush answer
    checkpoints = {}
    for vch in desc.virtual_channel_names:
        found = target.etcd_meta(f"datacoord-meta/channel-cp/{vch}")
        if found:
            checkpoints[vch] = found[0][1]
    return {
        "describe": desc,
        "partitions": partitions,
        "segments": segments,
        "checkpoints": checkpoints,
        "index_infos": _index_infos(target, name),
        "load_state": _load_state(target, name),
    }


def _insert_key(c, p, s, f, log_id) -> str:
    return f"insert_log/{c}/{p}/{s}/{f}/{log_id}"


def _delta_key(c, p, s, log_id) -> str:
    return f"delta_log/{c}/{p}/{s}/{log_id}"


def _binlog_json(b: dict, log_path: str) -> dict:
    return {
        "entries_num": b["entries_num"],
        "timestamp_from": b["timestamp_from"],
        "timestamp_to": b["timestamp_to"],
        "log_path": log_path,
        "log_size": b["log_size"],
        "log_id": b["log_id"],
    }


def write_backup(
    target: Target,
    names: list[str],
    backup_name: str,
    root: str = "backup",
    sources: dict[str, Source] | None = None,
    inflate: tuple[str, int] | None = None,
    drop_binlogs_of_one_segment: bool = False,
    deletes_to_l0: bool = False,
    log=print,
) -> pathlib.Path:
    """Writes backup `backup_name` of collections `names` under `{storage_dir}/{root}/`
    and its expected.json; returns the backup directory. Leaves nothing behind on failure."""
    backup_dir = target.storage_dir / root / backup_name
    if backup_dir.exists():
        raise RuntimeError(f"{backup_dir} exists already")
    try:
        return _write_backup(
            target, names, backup_name, backup_dir, sources, inflate, drop_binlogs_of_one_segment, deletes_to_l0, log
        )
    except BaseException:
        shutil.rmtree(backup_dir, ignore_errors=True)
        raise


def _write_backup(
    target, names, backup_name, backup_dir, sources, inflate, drop_binlogs_of_one_segment, deletes_to_l0, log
):
    backup_id = str(uuid.uuid4())
    now = time.time()
    backup_ts = (int(now * 1000) << 18)
    collections_json = []
    expected = {"backup": backup_name, "collections": {}, "segments": {}}
    copied = 0
    copied_bytes = 0

    for name in names:
        data = collect(target, name)
        desc = data["describe"]
        c = desc.collectionID
        pk_field = next(f for f in desc.schema.fields if f.is_primary_key)
        checkpoints_ts = [msg_position_timestamp(v) for v in data["checkpoints"].values()]
        coll_json = {
            "id": backup_id,
            "collection_id": c,
            "db_name": desc.db_name or "default",
            "collection_name": desc.collection_name,
            "schema": _schema_json(desc.schema),
            "shards_num": desc.shards_num,
            "consistency_level": int(desc.consistency_level),
            "backup_timestamp": max(checkpoints_ts) if checkpoints_ts else backup_ts,
            "has_index": bool(data["index_infos"]),
            "index_infos": data["index_infos"],
            "load_state": data["load_state"],
            "backup_physical_timestamp": int(now),
            "channel_checkpoints": {k: base64.b64encode(v).decode() for k, v in data["checkpoints"].items()},
            "properties": _kv(desc.properties),
            "db_id": getattr(desc, "db_id", 0) or 1,
            "created_timestamp": desc.created_timestamp,
            "virtual_channel_names": list(desc.virtual_channel_names),
            "physical_channel_names": list(desc.physical_channel_names),
            "aliases": list(desc.aliases),
            "partition_backups": [],
        }
        part_by_id = {}
        for pname, pid in data["partitions"]:
            part = {
                "partition_id": pid,
                "partition_name": pname,
                "collection_id": c,
                "load_state": data["load_state"],
                "segment_backups": [],
            }
            part_by_id[pid] = part
            coll_json["partition_backups"].append(part)

        survivors = set()
        for seg in data["segments"]:
            p, s = seg["partition_id"], seg["id"]
            group = s
            seg_json = {
                "segment_id": s,
                "collection_id": c,
                "partition_id": p,
                "num_of_rows": seg["num_of_rows"],
                "binlogs": [],
                "deltalogs": [],
                "group_id": group,
                "backuped": True,
                "is_l0": False,
                "v_channel": seg["insert_channel"],
            }
            size = 0
            pk_values: list = []
            for fb in seg["binlogs"]:
                entry = {"fieldID": fb["fieldID"], "binlogs": []}
                for b in fb["binlogs"]:
                    src_key = _insert_key(c, p, s, fb["fieldID"], b["log_id"])
                    dst = backup_dir / "binlogs" / "insert_log" / str(c) / str(p) / str(group) / str(s) / str(fb["fieldID"]) / str(b["log_id"])
                    _copy(target.storage_dir / src_key, dst, b["log_size"])
                    copied += 1
                    copied_bytes += b["log_size"]
                    size += b["log_size"]
                    if fb["fieldID"] == pk_field.fieldID:
                        parsed = binlog.read(dst)
                        pk_values += parsed.values
                    entry["binlogs"].append(_binlog_json(b, src_key))
                seg_json["binlogs"].append(entry)
            delete_entries = 0
            deleted_here = set()
            for fb in seg["deltalogs"]:
                entry = {"fieldID": fb["fieldID"], "binlogs": []}
                for b in fb["binlogs"]:
                    src_key = _delta_key(c, p, s, b["log_id"])
                    dst = backup_dir / "binlogs" / "delta_log" / str(c) / str(p) / str(group) / str(s) / str(b["log_id"])
                    _copy(target.storage_dir / src_key, dst, b["log_size"])
                    copied += 1
                    copied_bytes += b["log_size"]
                    size += b["log_size"]
                    parsed = binlog.read(dst)
                    if parsed.rows != b["entries_num"]:
                        raise RuntimeError(f"{dst}: {parsed.rows} deletes, etcd entries_num {b['entries_num']}")
                    delete_entries += b["entries_num"]
                    deleted_here.update(v["pk"] for v in parsed.values)
                    entry["binlogs"].append(_binlog_json(b, src_key))
                seg_json["deltalogs"].append(entry)
            if len(pk_values) != seg["num_of_rows"]:
                raise RuntimeError(f"segment {s}: pk binlog holds {len(pk_values)} rows, meta {seg['num_of_rows']}")
            seg_survivors = set(pk_values) - deleted_here
            survivors |= seg_survivors
            seg_json["size"] = size
            part_by_id[p]["segment_backups"].append(seg_json)
            expected["segments"][str(s)] = {
                "collection": name,
                "partition": next(n for n, i in data["partitions"] if i == p),
                "num_of_rows": seg["num_of_rows"],
                "delete_entries": delete_entries,
                "deleted_rows": len(set(pk_values) & deleted_here),
                "rows_after_deletes": len(seg_survivors),
                "delta_logs": sum(len(fb["binlogs"]) for fb in seg["deltalogs"]),
            }
        for part in coll_json["partition_backups"]:
            part["size"] = sum(s["size"] for s in part["segment_backups"])
        coll_json["size"] = sum(p["size"] for p in coll_json["partition_backups"])
        surviving = sorted(survivors)
        if sources and name in sources and surviving != sources[name].surviving:
            missing = set(sources[name].surviving) - survivors
            extra = survivors - set(sources[name].surviving)
            raise RuntimeError(f"{name}: binlogs disagree with what was inserted (missing {len(missing)}, extra {len(extra)})")
        expected["collections"][name] = {
            "collection_id": c,
            "pk_field": pk_field.name,
            "pk_type": "int64" if pk_field.data_type == 5 else "varchar",
            "rows": len(surviving),
            "inserted": sum(s["num_of_rows"] for s in data["segments"]),
            "partitions": len(data["partitions"]),
            "segments": len(data["segments"]),
            "pks": surviving,
        }
        collections_json.append(coll_json)

    # options a test needs
    all_segments = [
        (cj, pj, sj)
        for cj in collections_json
        for pj in cj["partition_backups"]
        for sj in pj["segment_backups"]
    ]
    if inflate is not None:
        which, by = inflate
        if which == "first":
            candidates = [x for x in all_segments if not any(fb["binlogs"] for fb in x[2]["deltalogs"])]
            if not candidates:
                raise RuntimeError("--inflate-rows first: every segment has delta logs")
            chosen = candidates[0]
        elif which == "first-with-deletes":
            # The case the meta's figures cannot catch: the deletes are not counted there
            # (entries_num), so any row count from 1 to the inserted rows looked possible.
            candidates = [x for x in all_segments if any(fb["binlogs"] for fb in x[2]["deltalogs"])]
            if not candidates:
                raise RuntimeError("--inflate-rows first-with-deletes: no segment has delta logs")
            chosen = candidates[0]
        else:
            chosen = next((x for x in all_segments if str(x[2]["segment_id"]) == which), None)
            if chosen is None:
                raise RuntimeError(f"--inflate-rows: no segment {which} in the backup")
            if any(fb["binlogs"] for fb in chosen[2]["deltalogs"]):
                raise RuntimeError(f"--inflate-rows: segment {which} has delta logs")
        seg_json = chosen[2]
        actual = seg_json["num_of_rows"]
        seg_json["num_of_rows"] = actual + by
        expected["inflated"] = {
            "collection": chosen[0]["collection_name"],
            "segment": seg_json["segment_id"],
            "actual_rows": actual,
            "meta_rows": actual + by,
        }
        log(f"inflated segment {seg_json['segment_id']}: meta num_of_rows {actual} -> {actual + by}")
    if deletes_to_l0:
        moved = _deletes_to_l0(backup_dir, collections_json)
        all_segments = [
            (cj, pj, sj)
            for cj in collections_json
            for pj in cj["partition_backups"]
            for sj in pj["segment_backups"]
        ]
        expected["l0_segments"] = moved
        log(f"moved the delete logs of every partition into {len(moved)} L0 segment(s)")
    if drop_binlogs_of_one_segment:
        cj, pj, sj = all_segments[0]
        group_dir = backup_dir / "binlogs" / "insert_log" / str(cj["collection_id"]) / str(pj["partition_id"]) / str(sj["group_id"])
        removed = sorted(str(p.relative_to(backup_dir)) for p in group_dir.rglob("*") if p.is_file())
        shutil.rmtree(group_dir)
        expected["dropped_binlogs"] = {
            "collection": cj["collection_name"],
            "segment": sj["segment_id"],
            "files": removed,
        }
        log(f"removed the {len(removed)} insert binlogs of segment {sj['segment_id']}")

    info = {
        "id": backup_id,
        "name": backup_name,
        "backup_timestamp": backup_ts,
        "size": sum(cj["size"] for cj in collections_json),
        "milvus_version": target_version(target),
        "database_backups": [{"db_name": "default", "db_id": 1}],
        "collection_backups": collections_json,
    }
    meta = backup_dir / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    _write_json(meta / "full_meta.json", omit_zero(info))
    _write_json(meta / "backup_meta.json", omit_zero({k: v for k, v in info.items() if k != "collection_backups"}))
    _write_json(
        meta / "collection_meta.json",
        {"infos": [omit_zero({k: v for k, v in cj.items() if k != "partition_backups"}) for cj in collections_json]},
    )
    _write_json(
        meta / "partition_meta.json",
        {
            "infos": [
                omit_zero({k: v for k, v in pj.items() if k != "segment_backups"})
                for cj in collections_json
                for pj in cj["partition_backups"]
            ]
        },
    )
    _write_json(meta / "segment_meta.json", {"infos": [omit_zero(sj) for _, _, sj in all_segments]})
    expected["binlog_files"] = copied
    expected["binlog_bytes"] = copied_bytes
    _write_json(backup_dir / "expected.json", expected)
    log(f"backup {backup_name}: {len(names)} collections, {len(all_segments)} segments, {copied} binlogs ({copied_bytes} bytes) at {backup_dir}")
    return backup_dir


def _deletes_to_l0(backup_dir: pathlib.Path, collections_json: list) -> list[dict]:
    """Moves every data segment's delete logs into one L0 (delete-only) segment entry of its
    partition, as Milvus 2.4 and later write deletes: files under the L0 segment's own delta
    directory, the data segments left with none. The rows a query sees do not change."""
    next_id = 1 + max(
        sj["segment_id"] for cj in collections_json for pj in cj["partition_backups"] for sj in pj["segment_backups"]
    )
    moved = []
    for cj in collections_json:
        c = cj["collection_id"]
        for pj in cj["partition_backups"]:
            p = pj["partition_id"]
            l0_id, next_id = next_id, next_id + 1
            logs = []
            for sj in pj["segment_backups"]:
                for fb in sj["deltalogs"]:
                    for b in fb["binlogs"]:
                        src = backup_dir / "binlogs" / "delta_log" / str(c) / str(p) / str(sj["group_id"]) / str(sj["segment_id"]) / str(b["log_id"])
                        dst = backup_dir / "binlogs" / "delta_log" / str(c) / str(p) / str(l0_id) / str(l0_id) / str(b["log_id"])
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        src.rename(dst)
                        logs.append(b)
                sj["deltalogs"] = []
            if not logs:
                continue
            entries = sum(b.get("entries_num", 0) for b in logs)
            pj["segment_backups"].append(
                {
                    "segment_id": l0_id,
                    "collection_id": c,
                    "partition_id": p,
                    "num_of_rows": entries,
                    "binlogs": [],
                    "deltalogs": [{"fieldID": 0, "binlogs": logs}],
                    "group_id": l0_id,
                    "backuped": True,
                    "is_l0": True,
                    "v_channel": pj["segment_backups"][0]["v_channel"],
                    "size": sum(b["log_size"] for b in logs),
                }
            )
            moved.append({"collection": cj["collection_name"], "partition": pj["partition_name"], "segment": l0_id, "delta_logs": len(logs)})
    return moved


def target_version(target: Target) -> str:
    from pymilvus import utility

    return utility.get_server_version(using=target.connect())


def _copy(src: pathlib.Path, dst: pathlib.Path, size: int) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    got = dst.stat().st_size
    if got != size or src.stat().st_size != size:
        raise RuntimeError(f"copy of {src}: {got} bytes at {dst}, source {src.stat().st_size}, meta {size}")


def _write_json(path: pathlib.Path, value) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n")
    os.replace(tmp, path)


def parse_inflate(text: str) -> tuple[str, int]:
    which, _, by = text.partition(":")
    return which or "first", int(by or 10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the server's base dir (reads DIR/configs/milvus.yaml)")
    parser.add_argument("--name", required=True, help="backup name")
    parser.add_argument("--root", default="backup", help="backup root under localStorage.path")
    parser.add_argument("--etcd", default=None)
    parser.add_argument("--populate", action="store_true", help="create and fill the source collections first")
    parser.add_argument("--prefix", default="src")
    parser.add_argument("--collections", default=None, help="comma-separated; default: the prefix's three")
    parser.add_argument("--inflate-rows", default=None, metavar="SEGMENT_OR_FIRST:N")
    parser.add_argument("--drop-binlogs-of-one-segment", action="store_true")
    args = parser.parse_args(argv)
    target = Target.from_data_dir(args.data, args.etcd)
    sources = None
    if args.populate:
        sources = {s.name: s for s in populate(target, args.prefix)}
    names = args.collections.split(",") if args.collections else [f"{args.prefix}_{k}" for k in ("ints", "strs", "pkey")]
    path = write_backup(
        target,
        names,
        args.name,
        args.root,
        sources,
        parse_inflate(args.inflate_rows) if args.inflate_rows else None,
        args.drop_binlogs_of_one_segment,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
