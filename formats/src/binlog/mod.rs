//! Milvus's binlog objects (storage format v1, `internal/storage`): read by milvus-sim's
//! import reader and by lockstep, written by milvus-sim's `gen-backup`, so the emulator takes
//! what a real Milvus wrote and writes what a real Milvus takes.
//!
//! ```text
//! object     = magic descriptor event+
//! magic      = int32 LE 0xfffabc                     (bytes bc fa ff 00)
//! header     = timestamp u64 | type i8 | length i32 | next_position i32     (17 bytes; the
//!              length counts the header; next_position is absolute, or -1 from the stream
//!              writers of 2.5 on)
//! descriptor = header | collection i64 | partition i64 | segment i64 | field i64 |
//!              start_ts u64 | end_ts u64 | payload_type i32 | post_header_lengths u8[8] |
//!              extras_length i32 | extras (JSON object, e.g. {"original_size":"40"})
//! event      = header | start_ts u64 | end_ts u64 | payload (a Parquet file)
//! ```
//!
//! Everything is little-endian. An insert binlog holds one field's values; a delta log holds
//! deletes ([`delta`] has its forms). [`payload`] maps Milvus's data types to Parquet columns.
//! The layout was checked byte for byte against objects a real Milvus 2.3.5 wrote
//! (`fixtures/real-2.3.5/`, whose tests live in this module).

pub mod delta;
mod pages;
pub mod payload;

use crate::value::Picked;
use milvus_proto::schema::DataType;

pub use delta::{Delete, DeltaForm, Pk, deleted_rows, deletes, encode_delta, removed};
pub use payload::Column;

/// `MagicNumber` of `binlog_writer.go`.
pub const MAGIC: i32 = 0xfffabc;
const HEADER_LEN: usize = 17;
/// The descriptor's fixed part: four ids, two timestamps, the payload type.
const DESCRIPTOR_FIX_LEN: usize = 52;
/// Start and end timestamp before an insert or delete event's payload.
const EVENT_FIX_LEN: usize = 16;
/// One fixed-part length per event type Milvus knows (`Descriptor` to `IndexFile`); the
/// reader, like Milvus's, takes the count as a constant of the format.
const POST_HEADER_LENGTHS: [u8; 8] = [52, 16, 16, 16, 16, 16, 16, 16];

/// `EventTypeCode` of `event_header.go`, the kinds an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Insert = 1,
    Delete = 2,
}

/// The descriptor event: whose data the object holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    pub collection_id: i64,
    pub partition_id: i64,
    pub segment_id: i64,
    /// The field of an insert binlog; -1 in a delta log (`common.InvalidFieldID`) written in
    /// the one-column form.
    pub field_id: i64,
    pub start_ts: u64,
    pub end_ts: u64,
    /// `schemapb.DataType` of the payload, raw: an unknown type is the reader's to refuse.
    pub payload_type: i32,
    pub extras: serde_json::Map<String, serde_json::Value>,
    /// The timestamp in every event header: when the object was written.
    pub written_ts: u64,
}

impl Descriptor {
    /// The descriptor of a log of `field_id` whose payload is of `payload_type`, with the
    /// ids and timestamps left for the caller to fill.
    pub fn new(field_id: i64, payload_type: DataType) -> Self {
        Self {
            collection_id: 0,
            partition_id: 0,
            segment_id: 0,
            field_id,
            start_ts: 0,
            end_ts: 0,
            payload_type: payload_type as i32,
            extras: serde_json::Map::new(),
            written_ts: 0,
        }
    }
}

/// One insert or delete event and its Parquet payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    pub kind: EventType,
    pub payload: &'a [u8],
}

/// A parsed binlog object: the descriptor and its events, payloads still encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Binlog<'a> {
    pub descriptor: Descriptor,
    pub events: Vec<Event<'a>>,
}

/// Why an object is not a binlog Milvus would read. The Display text is the detail of a job's
/// failure reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("parse magic number failed: the object is {len} bytes, shorter than the magic")]
    TooShort { len: usize },
    /// Storage version 2 writes plain Parquet files of column groups, not binlogs.
    #[error(
        "the object is a Parquet file, not a binlog: a storage version 2 or 3 (column \
         group) segment's file"
    )]
    PackedParquet,
    /// Milvus's wording (`readMagicNumber`), numbers in decimal.
    #[error("parse magic number failed, expected: {MAGIC}, actual: {found}")]
    BadMagic { found: i32 },
    #[error("the {what} at byte {at} runs past the end of the object ({len} bytes)")]
    Truncated {
        what: &'static str,
        at: usize,
        len: usize,
    },
    #[error("the first event is of type {found}, not the descriptor event")]
    NoDescriptor { found: i8 },
    #[error("bad descriptor event: {0}")]
    BadDescriptor(String),
    #[error("event at byte {at} is of type {found}, which an import does not read")]
    UnexpectedEvent { at: usize, found: i8 },
    #[error("event at byte {at} has length {length}, shorter than its header")]
    BadEventLength { at: usize, length: i32 },
    #[error("the binlog has a descriptor event and no data event")]
    NoEvents,
    #[error("bad payload: {0}")]
    Payload(String),
    #[error("bad delete entry {entry:?}: {reason}")]
    BadDelete { entry: String, reason: String },
}

fn take<'a>(bytes: &'a [u8], at: usize, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
    bytes.get(at..at + n).ok_or(Error::Truncated {
        what,
        at,
        len: bytes.len(),
    })
}

fn le<const N: usize>(bytes: &[u8], at: usize, what: &'static str) -> Result<[u8; N], Error> {
    let slice = take(bytes, at, N, what)?;
    Ok(slice.try_into().expect("take returned N bytes"))
}

struct Header {
    ts: u64,
    kind: i8,
    length: i32,
}

fn header(bytes: &[u8], at: usize) -> Result<Header, Error> {
    let raw = take(bytes, at, HEADER_LEN, "event header")?;
    Ok(Header {
        ts: u64::from_le_bytes(raw[..8].try_into().expect("8 bytes")),
        kind: raw[8] as i8,
        length: i32::from_le_bytes(raw[9..13].try_into().expect("4 bytes")),
    })
}

/// Where an event that starts at `at` ends. Only the event length counts: Milvus's readers
/// ignore the next position, which its stream writers (2.5 on) leave at -1.
fn event_end(bytes: &[u8], at: usize, h: &Header) -> Result<usize, Error> {
    let end = usize::try_from(h.length)
        .ok()
        .filter(|n| *n >= HEADER_LEN)
        .and_then(|n| at.checked_add(n))
        .ok_or(Error::BadEventLength {
            at,
            length: h.length,
        })?;
    if end > bytes.len() {
        return Err(Error::Truncated {
            what: "event",
            at,
            len: bytes.len(),
        });
    }
    Ok(end)
}

/// Parses an object's framing: magic, descriptor, and every insert or delete event.
pub fn parse(bytes: &[u8]) -> Result<Binlog<'_>, Error> {
    let magic = bytes.get(..4).ok_or(Error::TooShort { len: bytes.len() })?;
    if magic == b"PAR1" {
        return Err(Error::PackedParquet);
    }
    let magic = i32::from_le_bytes(magic.try_into().expect("4 bytes"));
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let h = header(bytes, 4)?;
    if h.kind != 0 {
        return Err(Error::NoDescriptor { found: h.kind });
    }
    let end = event_end(bytes, 4, &h)?;
    let descriptor = descriptor(&bytes[4 + HEADER_LEN..end], h.ts)?;
    let mut events = Vec::new();
    let mut at = end;
    while at < bytes.len() {
        let h = header(bytes, at)?;
        let kind = match h.kind {
            1 => EventType::Insert,
            2 => EventType::Delete,
            found => return Err(Error::UnexpectedEvent { at, found }),
        };
        let end = event_end(bytes, at, &h)?;
        let payload = bytes
            .get(at + HEADER_LEN + EVENT_FIX_LEN..end)
            .ok_or(Error::Truncated {
                what: "event timestamps",
                at,
                len: bytes.len(),
            })?;
        events.push(Event { kind, payload });
        at = end;
    }
    if events.is_empty() {
        return Err(Error::NoEvents);
    }
    Ok(Binlog { descriptor, events })
}

fn descriptor(data: &[u8], written_ts: u64) -> Result<Descriptor, Error> {
    let what = "descriptor";
    let i64_at = |at| le::<8>(data, at, what).map(i64::from_le_bytes);
    let u64_at = |at| le::<8>(data, at, what).map(u64::from_le_bytes);
    let extras_at = DESCRIPTOR_FIX_LEN + POST_HEADER_LENGTHS.len();
    let extras_len = le::<4>(data, extras_at, what).map(i32::from_le_bytes)?;
    let extras = usize::try_from(extras_len)
        .ok()
        .and_then(|n| data.get(extras_at + 4..extras_at + 4 + n))
        .filter(|raw| extras_at + 4 + raw.len() == data.len())
        .ok_or_else(|| {
            Error::BadDescriptor(format!(
                "extras length {extras_len} does not fill the {} bytes of the event",
                data.len()
            ))
        })?;
    let extras = match extras {
        [] => serde_json::Map::new(),
        raw => serde_json::from_slice(raw)
            .map_err(|e| Error::BadDescriptor(format!("extras are not a JSON object: {e}")))?,
    };
    Ok(Descriptor {
        collection_id: i64_at(0)?,
        partition_id: i64_at(8)?,
        segment_id: i64_at(16)?,
        field_id: i64_at(24)?,
        start_ts: u64_at(32)?,
        end_ts: u64_at(40)?,
        payload_type: le::<4>(data, 48, what).map(i32::from_le_bytes)?,
        extras,
        written_ts,
    })
}

/// Writes an object of one event, as Milvus's binlog writer does: `descriptor`, then an event
/// of `kind` over `payload` spanning the descriptor's timestamps.
pub fn encode(descriptor: &Descriptor, kind: EventType, payload: &[u8]) -> Vec<u8> {
    let extras = if descriptor.extras.is_empty() {
        Vec::new()
    } else {
        serde_json::to_vec(&descriptor.extras).expect("a JSON map serializes")
    };
    let descriptor_len =
        HEADER_LEN + DESCRIPTOR_FIX_LEN + POST_HEADER_LENGTHS.len() + 4 + extras.len();
    let event_len = HEADER_LEN + EVENT_FIX_LEN + payload.len();
    let mut out = Vec::with_capacity(4 + descriptor_len + event_len);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    let ts = descriptor.written_ts;
    write_header(&mut out, ts, 0, descriptor_len);
    for id in [
        descriptor.collection_id,
        descriptor.partition_id,
        descriptor.segment_id,
        descriptor.field_id,
    ] {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.extend_from_slice(&descriptor.start_ts.to_le_bytes());
    out.extend_from_slice(&descriptor.end_ts.to_le_bytes());
    out.extend_from_slice(&descriptor.payload_type.to_le_bytes());
    out.extend_from_slice(&POST_HEADER_LENGTHS);
    let extras_len = i32::try_from(extras.len()).expect("extras are a few bytes");
    out.extend_from_slice(&extras_len.to_le_bytes());
    out.extend_from_slice(&extras);
    write_header(&mut out, ts, kind as i8, event_len);
    out.extend_from_slice(&descriptor.start_ts.to_le_bytes());
    out.extend_from_slice(&descriptor.end_ts.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn write_header(out: &mut Vec<u8>, ts: u64, kind: i8, length: usize) {
    let next = out.len() + length;
    let fits = |n: usize| i32::try_from(n).expect("a binlog object is under 2 GiB");
    out.extend_from_slice(&ts.to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&fits(length).to_le_bytes());
    out.extend_from_slice(&fits(next).to_le_bytes());
}

/// An insert binlog of one field: `column`'s values, described by `descriptor` (whose
/// payload type is set from the column, and `original_size` from its memory size, as Milvus
/// records it).
pub fn encode_insert(mut descriptor: Descriptor, column: &Column) -> Vec<u8> {
    descriptor.payload_type = column.data_type() as i32;
    descriptor.extras.insert(
        "original_size".into(),
        column.memory_size().to_string().into(),
    );
    encode(&descriptor, EventType::Insert, &column.to_parquet())
}

/// The data type a binlog's descriptor says its payloads hold.
fn payload_type(binlog: &Binlog<'_>) -> Result<DataType, Error> {
    DataType::try_from(binlog.descriptor.payload_type).map_err(|_| {
        Error::BadDescriptor(format!(
            "unknown payload data type {}",
            binlog.descriptor.payload_type
        ))
    })
}

/// What an insert binlog holds once its payloads are read: how many rows.
pub fn insert_rows(binlog: &Binlog<'_>) -> Result<usize, Error> {
    let data_type = payload_type(binlog)?;
    let mut rows = 0;
    for event in insert_events(binlog)? {
        rows += payload::rows(event.payload, data_type)?;
    }
    Ok(rows)
}

/// What an insert binlog's payloads declare in their footers: how many rows, read without
/// decoding a page (see [`payload::footer_rows`]).
pub fn insert_rows_declared(binlog: &Binlog<'_>) -> Result<usize, Error> {
    let data_type = payload_type(binlog)?;
    let mut rows = 0;
    for event in insert_events(binlog)? {
        rows += payload::footer_rows(event.payload, data_type)?;
    }
    Ok(rows)
}

/// The values of an insert binlog of Int64 data: RowIDs, timestamps, an Int64 primary key.
pub fn int64_values(binlog: &Binlog<'_>) -> Result<Vec<i64>, Error> {
    let mut out = Vec::new();
    for event in insert_events(binlog)? {
        out.extend(pages::int64s(event.payload)?);
    }
    Ok(out)
}

/// The primary keys an insert binlog of an Int64 or VarChar primary key holds.
pub fn pk_values(binlog: &Binlog<'_>) -> Result<Vec<Pk>, Error> {
    let varchar = binlog.descriptor.payload_type == DataType::VarChar as i32;
    let mut out = Vec::new();
    for event in insert_events(binlog)? {
        if varchar {
            out.extend(pages::strings(event.payload)?.into_iter().map(Pk::VarChar));
        } else {
            out.extend(pages::int64s(event.payload)?.into_iter().map(Pk::Int));
        }
    }
    Ok(out)
}

/// The values of rows `wanted` (sorted row numbers of the field's whole column, across its
/// logs) that this insert binlog holds, its first row being row `first` of the column; and
/// how many rows it holds.
pub fn values(binlog: &Binlog<'_>, first: usize, wanted: &[usize]) -> Result<Picked, Error> {
    let data_type = DataType::try_from(binlog.descriptor.payload_type).map_err(|_| {
        Error::BadDescriptor(format!(
            "unknown payload data type {}",
            binlog.descriptor.payload_type
        ))
    })?;
    let mut arrays = Vec::new();
    for event in insert_events(binlog)? {
        arrays.extend(payload::single_columns(event.payload, data_type)?);
    }
    crate::value::pick(&arrays, data_type, first, wanted).map_err(|e| Error::Payload(e.0))
}

fn insert_events<'b, 'a>(binlog: &'b Binlog<'a>) -> Result<&'b [Event<'a>], Error> {
    if binlog.events.iter().any(|e| e.kind != EventType::Insert) {
        return Err(Error::Payload("a delete event in an insert binlog".into()));
    }
    Ok(&binlog.events)
}

#[cfg(test)]
mod tests;
