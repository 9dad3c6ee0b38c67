"""A reader for the binlog objects a real Milvus 2.3 writes (insert_log, delta_log), to check
what a backup copied and to describe fixtures. Not a general implementation: enough of
internal/storage's format (binlog_writer.go, event_header.go, event_data.go) for 2.3.5.

    object   = magic (int32 LE 0xfffabc: bytes bc fa ff 00) descriptor-event event*
    header   = timestamp u64 | type_code i8 | event_length i32 | next_position i32   (17 bytes)
    descriptor data = collection_id i64 | partition_id i64 | segment_id i64 | field_id i64 |
               start_ts u64 | end_ts u64 | payload_data_type i32 | post_header_lengths u8[n] |
               extra_length i32 | extras (JSON)
    insert/delete event data = start_ts u64 | end_ts u64 | payload (a Parquet file)

Delete events carry one string per deleted row: in 2.3 a JSON `{"pkType":..,"ts":..,"pk":..}`
(older versions wrote "pk,ts"), both handled.

    python binlog.py FILE...    prints what each file holds
"""

from __future__ import annotations

import io
import json
import struct
import sys
from dataclasses import dataclass, field

MAGIC = 0xFFFABC
MAGIC_BYTES = struct.pack("<i", MAGIC)  # b"\xbc\xfa\xff\x00"
HEADER = struct.Struct("<QbiI")  # timestamp, type_code, event_length, next_position
DESCRIPTOR_FIX = struct.Struct("<qqqqQQi")

EVENT_TYPES = {
    0: "Descriptor",
    1: "Insert",
    2: "Delete",
    3: "CreateCollection",
    4: "DropCollection",
    5: "CreatePartition",
    6: "DropPartition",
    7: "IndexFile",
}

# schemapb.DataType
DATA_TYPES = {
    0: "None",
    1: "Bool",
    2: "Int8",
    3: "Int16",
    4: "Int32",
    5: "Int64",
    10: "Float",
    11: "Double",
    20: "String",
    21: "VarChar",
    22: "Array",
    23: "JSON",
    100: "BinaryVector",
    101: "FloatVector",
    102: "Float16Vector",
}


@dataclass
class Event:
    type_code: int
    timestamp: int
    start_ts: int
    end_ts: int
    values: list = field(default_factory=list)


@dataclass
class Binlog:
    collection_id: int
    partition_id: int
    segment_id: int
    field_id: int
    start_ts: int
    end_ts: int
    data_type: int
    extras: dict
    events: list

    @property
    def kind(self) -> str:
        types = {e.type_code for e in self.events}
        return "delete" if types == {2} else "insert" if types == {1} else str(sorted(types))

    @property
    def values(self) -> list:
        return [v for e in self.events for v in e.values]

    @property
    def rows(self) -> int:
        return len(self.values)


def _payload_values(payload: bytes, data_type: int, type_code: int) -> list:
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(payload))
    column = table.column(0).to_pylist()
    if type_code == 2:
        return [_delete_entry(v) for v in column]
    if data_type == 23:  # JSON: bytes of a JSON document
        return [json.loads(v) if v is not None else None for v in column]
    if data_type == 101:  # float vector: little-endian f32s
        return [list(struct.unpack(f"<{len(v) // 4}f", v)) for v in column]
    if data_type == 100:  # binary vector: bytes, shown as hex
        return [v.hex() for v in column]
    return column


def _delete_entry(value) -> dict:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        entry = json.loads(value)
        return {"pk": entry.get("pk"), "ts": entry.get("ts"), "pk_type": entry.get("pkType")}
    except ValueError:
        pk, _, ts = value.rpartition(",")
        return {"pk": pk, "ts": int(ts), "pk_type": None}


def parse(data: bytes) -> Binlog:
    if data[:4] != MAGIC_BYTES:
        raise ValueError(f"not a Milvus binlog: starts with {data[:4].hex()}, want {MAGIC_BYTES.hex()}")
    pos = 4
    ts, type_code, length, next_pos = HEADER.unpack_from(data, pos)
    if type_code != 0:
        raise ValueError(f"first event is type {type_code}, want the descriptor (0)")
    body = pos + HEADER.size
    coll, part, seg, fid, start, end, dtype = DESCRIPTOR_FIX.unpack_from(data, body)
    after_fix = body + DESCRIPTOR_FIX.size
    event_end = pos + length
    extras = None
    # post_header_lengths has one byte per event type; its count is not written, so find the
    # split where extra_length and the JSON extras fill the event exactly.
    for n in range(0, 32):
        at = after_fix + n
        if at + 4 > event_end:
            break
        (extra_len,) = struct.unpack_from("<i", data, at)
        if extra_len >= 0 and at + 4 + extra_len == event_end:
            raw = data[at + 4 : event_end]
            try:
                extras = json.loads(raw.decode()) if raw else {}
                break
            except ValueError:
                continue
    if extras is None:
        raise ValueError("descriptor event extras not found")
    pos = next_pos
    events = []
    while pos < len(data):
        ts, type_code, length, next_pos = HEADER.unpack_from(data, pos)
        start_ts, end_ts = struct.unpack_from("<QQ", data, pos + HEADER.size)
        payload = data[pos + HEADER.size + 16 : pos + length]
        events.append(Event(type_code, ts, start_ts, end_ts, _payload_values(payload, dtype, type_code)))
        if next_pos <= pos:
            break
        pos = next_pos
    return Binlog(coll, part, seg, fid, start, end, dtype, extras, events)


def read(path) -> Binlog:
    with open(path, "rb") as fh:
        return parse(fh.read())


def main(argv: list[str]) -> int:
    for path in argv:
        log = read(path)
        print(
            json.dumps(
                {
                    "file": path,
                    "kind": log.kind,
                    "collection_id": log.collection_id,
                    "partition_id": log.partition_id,
                    "segment_id": log.segment_id,
                    "field_id": log.field_id,
                    "data_type": DATA_TYPES.get(log.data_type, log.data_type),
                    "extras": log.extras,
                    "rows": log.rows,
                    "values": log.values,
                },
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
