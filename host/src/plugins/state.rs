//! The data of one check call's `Store`: grants, limits and collected logs,
//! and the host imports implemented on it. Nothing here outlives the call.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{wit_host, wit_types};
use super::host_services::{CheckHost, HostError, MAX_PAGE, ObjectInfo};
use super::http::Egress;

/// Where a check's clock reads from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    #[default]
    System,
    /// A fixed instant, for tests and `lockstep plugin test`; the WASI wall
    /// clock reads it too.
    Fixed(jiff::Timestamp),
}

impl Clock {
    pub(crate) fn now(&self) -> jiff::Timestamp {
        match self {
            Clock::System => jiff::Timestamp::now(),
            Clock::Fixed(at) => *at,
        }
    }
}

/// Severity of a log line a check writes (WIT `log-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        })
    }
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `log` import.
    Host,
    /// The guest's stdout (one line per line written).
    Stdout,
    /// The guest's stderr.
    Stderr,
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogSource::Host => "log",
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
        })
    }
}

/// One line a check logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub source: LogSource,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

/// Log lines kept per call; a check that logs more loses the rest (counted),
/// so a chatty check cannot grow the host's memory without bound.
pub(crate) const MAX_LOG_LINES: usize = 1000;
/// Bytes kept per log message or field.
const MAX_LOG_TEXT: usize = 4096;

/// What one call may reach, fixed when the store is created.
pub(crate) struct Grants {
    pub check: String,
    pub restore_id: String,
    pub ends: Vec<String>,
    pub host: Arc<dyn CheckHost>,
    /// The check's HTTP GETs, with the names this call resolved.
    pub egress: Egress,
    pub clock: Clock,
}

pub(crate) struct CheckState {
    pub grants: Grants,
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: CheckLimiter,
    /// Epoch ticks (10 ms each) this call spent running wasm.
    pub cpu_ticks: u64,
    pub cpu_budget_ticks: u64,
    pub cpu_exhausted: bool,
    pub logs: Vec<LogLine>,
    pub dropped_logs: usize,
}

impl CheckState {
    pub(crate) fn push_log(&mut self, line: LogLine) {
        if self.logs.len() < MAX_LOG_LINES {
            self.logs.push(line);
        } else {
            self.dropped_logs += 1;
        }
    }

    fn check_end(&self, end: &str) -> Result<(), wit_host::StorageError> {
        if self.grants.ends.iter().any(|e| e == end) {
            Ok(())
        } else {
            Err(wit_host::StorageError::UnknownEnd(end.to_owned()))
        }
    }
}

/// Core instances one call's store may create. A check is one component: a Rust
/// check instantiates 3 core modules, componentize-py's output 14; 64 leaves room
/// for bigger runtimes and still stops a component made of thousands.
pub(crate) const MAX_CORE_INSTANCES: usize = 64;
/// Memories one call's store may create: every check built so far has one (the
/// guest's libc and runtime share it); 4 allows a few more without letting many
/// small memories add up to the process's address space.
pub(crate) const MAX_MEMORIES: usize = 4;
/// Tables one call's store may create: checks have two (the functions called
/// indirectly, and the WASI adapter's).
pub(crate) const MAX_TABLES: usize = 16;

/// Bytes one table element is counted as: a function reference is a pointer,
/// the widest element a table holds, so no table is counted smaller than it is.
const TABLE_ELEMENT_BYTES: usize = size_of::<usize>();

/// Holds one call's memories and tables, together, under the check's memory
/// limit. wasmtime asks before it creates a memory or table (growing it from 0
/// to its initial size) and before each growth; the limiter keeps the running
/// total of every memory's bytes and every table's elements × element size, so
/// several memories or a large table cannot each stay under the limit while
/// together passing it. A refusal traps, so the call ends there and reports
/// `memory limit`; nothing is ever given back, since memories and tables live
/// as long as the store, which is the call.
pub(crate) struct CheckLimiter {
    limit: usize,
    /// Bytes the store's memories and tables hold.
    used: usize,
    /// The total the guest asked for when it hit the limit.
    pub memory_refused: Option<usize>,
}

impl CheckLimiter {
    pub(crate) fn new(limit: usize) -> Self {
        CheckLimiter {
            limit,
            used: 0,
            memory_refused: None,
        }
    }

    fn grow(&mut self, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(desired.saturating_sub(current));
        if total > self.limit {
            self.memory_refused = Some(total);
            return Err(wasmtime::format_err!(
                "memories and tables would hold {total} bytes, over the limit of {} bytes",
                self.limit
            ));
        }
        self.used = total;
        Ok(true)
    }
}

impl ResourceLimiter for CheckLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(current, desired)
    }

    /// A growth failed after the limiter allowed it (past the memory's declared
    /// maximum, or the allocation failed) or could never happen: trap, as
    /// lockstep always did, so the total never needs taking back.
    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

impl WasiView for CheckState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn clip(mut text: String) -> String {
    if text.len() > MAX_LOG_TEXT {
        let mut cut = MAX_LOG_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn storage_error(error: HostError) -> wit_host::StorageError {
    match error {
        HostError::UnknownEnd(end) => wit_host::StorageError::UnknownEnd(end),
        HostError::BadPageToken => wit_host::StorageError::BadPageToken,
        HostError::Failed(reason) => wit_host::StorageError::Failed(reason),
    }
}

fn object_meta(info: ObjectInfo) -> wit_host::ObjectMeta {
    wit_host::ObjectMeta {
        path: info.path,
        size: info.size,
        last_modified_ms: info.last_modified_ms,
    }
}

impl wit_types::Host for CheckState {}

impl wit_host::Host for CheckState {
    fn log(
        &mut self,
        level: wit_host::LogLevel,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let level = match level {
            wit_host::LogLevel::Trace => LogLevel::Trace,
            wit_host::LogLevel::Debug => LogLevel::Debug,
            wit_host::LogLevel::Info => LogLevel::Info,
            wit_host::LogLevel::Warn => LogLevel::Warn,
            wit_host::LogLevel::Error => LogLevel::Error,
        };
        let line = LogLine {
            level,
            source: LogSource::Host,
            message: clip(message),
            fields: fields
                .into_iter()
                .take(32)
                .map(|(k, v)| (clip(k), clip(v)))
                .collect(),
        };
        emit(&self.grants.check, &self.grants.restore_id, &line);
        self.push_log(line);
        Ok(())
    }

    async fn head_object(
        &mut self,
        end: String,
        path: String,
    ) -> Result<Option<wit_host::ObjectMeta>, wit_host::StorageError> {
        self.check_end(&end)?;
        let host = Arc::clone(&self.grants.host);
        host.head(&end, &path)
            .await
            .map(|found| found.map(object_meta))
            .map_err(storage_error)
    }

    async fn list_objects(
        &mut self,
        end: String,
        prefix: String,
        page_token: Option<String>,
        limit: u32,
    ) -> Result<wit_host::ObjectPage, wit_host::StorageError> {
        self.check_end(&end)?;
        let host = Arc::clone(&self.grants.host);
        host.list(
            &end,
            &prefix,
            page_token.as_deref(),
            limit.clamp(1, MAX_PAGE),
        )
        .await
        .map(|page| wit_host::ObjectPage {
            objects: page.objects.into_iter().map(object_meta).collect(),
            next_page_token: page.next_page_token,
        })
        .map_err(storage_error)
    }

    async fn staged_files(
        &mut self,
        page_token: Option<String>,
        limit: u32,
    ) -> Result<wit_host::StagedPage, wit_host::StorageError> {
        let host = Arc::clone(&self.grants.host);
        host.staged_files(page_token.as_deref(), limit.clamp(1, MAX_PAGE))
            .await
            .map(|page| wit_host::StagedPage {
                files: page
                    .files
                    .into_iter()
                    .map(|f| wit_host::StagedFile {
                        path: f.path,
                        size: f.size,
                        batch: f.batch,
                    })
                    .collect(),
                next_page_token: page.next_page_token,
            })
            .map_err(storage_error)
    }

    async fn http_get(
        &mut self,
        url: String,
        headers: Vec<(String, String)>,
    ) -> Result<wit_host::HttpResponse, wit_host::HttpError> {
        let result = self.grants.egress.get(&url, &headers).await;
        if let Err(wit_host::HttpError::NotAllowed(reason)) = &result {
            tracing::warn!(check = %self.grants.check, %url, %reason, "check's http-get refused");
        }
        result
    }

    fn now_ms(&mut self) -> wasmtime::Result<i64> {
        Ok(self.grants.clock.now().as_millisecond())
    }
}

/// Sends one check log line into the host's log, tagged with the check.
pub(crate) fn emit(check: &str, restore_id: &str, line: &LogLine) {
    let fields = line
        .fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let source = line.source.to_string();
    match line.level {
        LogLevel::Trace => tracing::trace!(check, restore_id, %source, fields, "{}", line.message),
        LogLevel::Debug => tracing::debug!(check, restore_id, %source, fields, "{}", line.message),
        LogLevel::Info => tracing::info!(check, restore_id, %source, fields, "{}", line.message),
        LogLevel::Warn => tracing::warn!(check, restore_id, %source, fields, "{}", line.message),
        LogLevel::Error => tracing::error!(check, restore_id, %source, fields, "{}", line.message),
    }
}

/// Epoch tick length; Spin's default. CPU limits are counted in these.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);
