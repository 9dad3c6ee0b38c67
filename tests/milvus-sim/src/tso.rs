//! Milvus's hybrid timestamps (TSOs): physical milliseconds since the epoch in the high bits,
//! an 18-bit logical counter below. Every clock milvus-sim answers in (replication
//! checkpoints, `AllocTimestamp`, created timestamps, the backups it generates) and its ids
//! are made here, so that a checkpoint and an allocated timestamp compare as on Milvus.

/// The bits of the logical counter.
const LOGICAL_BITS: u32 = 18;

/// The TSO of `physical_ms` with logical part `logical`.
pub fn compose(physical_ms: u64, logical: u64) -> u64 {
    (physical_ms << LOGICAL_BITS) | logical
}

/// The TSO of a Unix time in milliseconds, logical part 0; a time before the epoch is the
/// epoch's.
pub fn from_unix_ms(unix_ms: i64) -> u64 {
    compose(unix_ms.max(0) as u64, 0)
}

/// The TSO of now, logical part 0.
pub fn now() -> u64 {
    now_shifted(jiff::SignedDuration::ZERO)
}

/// The TSO of now on a clock `offset` from the host's (a cluster whose clock runs behind
/// has a negative offset), logical part 0.
pub fn now_shifted(offset: jiff::SignedDuration) -> u64 {
    let now = jiff::Timestamp::now().as_millisecond();
    from_unix_ms(now.saturating_add(offset.as_millis() as i64))
}
