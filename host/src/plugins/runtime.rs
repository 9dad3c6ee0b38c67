//! [`PluginRuntime`] (engine, linker, epoch ticker, compile cache) and
//! [`Plugin`] (one loaded component), with the per-call sandbox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::bindings::{Check as CheckWorld, CheckPre, wit_types};
use super::cache::{CacheOutcome, CompileCache};
use super::host_services::CheckHost;
use super::http::{self, AllowedHosts, Egress, HttpLimits, Resolver, SystemResolver};
use super::inspect::refuse_foreign_imports;
use super::spec::CheckLimits;
use super::state::{
    CheckLimiter, CheckState, Clock, EPOCH_TICK, Grants, MAX_CORE_INSTANCES, MAX_MEMORIES,
    MAX_TABLES, emit,
};
use super::{CheckContext, Error, LogLevel, LogLine, LogSource};

/// How instances get their memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Allocation {
    /// The pooling allocator (instantiation in ~20 µs instead of ~30 µs),
    /// falling back to on-demand when the machine cannot reserve the pool's
    /// address space (small VA, strict overcommit).
    #[default]
    PoolingIfAvailable,
    /// mmap per instance; always works.
    OnDemand,
}

/// How the runtime is set up; [`PluginRuntime::new`] takes the defaults.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Folder of the compile cache (created if missing).
    pub cache_dir: PathBuf,
    pub allocation: Allocation,
    pub http: HttpLimits,
    /// How the names in checks' `allow_hosts` are looked up; the system's resolver.
    pub resolver: Arc<dyn Resolver>,
}

impl RuntimeConfig {
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            cache_dir: cache_dir.into(),
            allocation: Allocation::default(),
            http: HttpLimits::default(),
            resolver: Arc::new(SystemResolver),
        }
    }
}

/// What a check may reach besides the restore's ends' storage.
#[derive(Debug, Clone, Default)]
pub struct CheckGrants {
    pub allow_hosts: AllowedHosts,
    pub clock: Clock,
}

/// A check's decision (WIT `verdict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail { reason: String },
    RetryAfter { after: Duration, reason: String },
}

/// Why a call produced no verdict. The host is unaffected; the store of the
/// call is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The guest trapped (`unreachable`, out-of-bounds access, a panic...).
    #[error("trap: {kind}{}", frame.as_ref().map(|f| format!(" at {f}")).unwrap_or_default())]
    Trap { kind: String, frame: Option<String> },
    #[error("cpu limit: ran wasm for more than {} ms", limit.as_millis())]
    CpuLimit { limit: Duration },
    /// Growing a memory or table would have taken the instance's memories and
    /// tables together to `requested` bytes.
    #[error("memory limit: tried to grow memory to {requested} bytes, limit is {limit} bytes")]
    MemoryLimit { requested: usize, limit: usize },
    #[error("timeout: no verdict within {} ms", limit.as_millis())]
    Timeout { limit: Duration },
    /// Instantiation or the call failed for another reason (e.g. the pool is
    /// exhausted, or guest output overflowed its capture buffer).
    #[error("call failed: {0}")]
    Failed(String),
}

/// The result of one call: the outcome, what the check logged, how long it took.
#[derive(Debug, Clone)]
pub struct CheckRun {
    pub outcome: Result<Verdict, CheckError>,
    pub logs: Vec<LogLine>,
    /// Log lines beyond the per-call cap, dropped.
    pub dropped_logs: usize,
    pub elapsed: Duration,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Pass => f.write_str("pass"),
            Verdict::Fail { reason } => write!(f, "fail: {reason}"),
            Verdict::RetryAfter { after, reason } => {
                write!(f, "retry after {} ms: {reason}", after.as_millis())
            }
        }
    }
}

/// What `lockstep plugin test` prints: the verdict or error, the time the
/// call took, then every log line.
impl std::fmt::Display for CheckRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Ok(verdict) => writeln!(f, "verdict: {verdict}")?,
            Err(error) => writeln!(f, "error:   {error}")?,
        }
        write!(f, "time:    {:.3} ms", self.elapsed.as_secs_f64() * 1000.0)?;
        for line in &self.logs {
            write!(f, "\n{:<5} [{}] {}", line.level, line.source, line.message)?;
            for (key, value) in &line.fields {
                write!(f, " {key}={value}")?;
            }
        }
        if self.dropped_logs > 0 {
            write!(f, "\n({} more log lines dropped)", self.dropped_logs)?;
        }
        Ok(())
    }
}

/// Bytes of guest stdout and stderr kept per call.
const OUTPUT_CAPTURE: usize = 64 * 1024;

/// Pool sizes: checks run one at a time per restore and a host runs a handful
/// of restores at once, so 128 concurrent instances is plenty. The per-
/// component counts are the ones every call's limiter enforces (so both
/// allocators refuse the same components); a table may hold up to 100 000
/// elements (componentize-py output has a ~30 000-entry function table).
const POOL_INSTANCES: u32 = 128;
const POOL_TABLE_ELEMENTS: usize = 100_000;

struct Shared {
    engine: Engine,
    linker: Linker<CheckState>,
    cache: CompileCache,
    allocation: Allocation,
    http_client: reqwest::Client,
    http_limits: HttpLimits,
    resolver: Arc<dyn Resolver>,
    /// Dropping this stops the epoch ticker thread.
    _ticker: mpsc::Sender<()>,
}

/// The process-wide wasm host. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct PluginRuntime {
    shared: Arc<Shared>,
}

/// One loaded check component, ready to call. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    runtime: PluginRuntime,
    pre: CheckPre<CheckState>,
    name: String,
    path: PathBuf,
    limits: CheckLimits,
    cache: CacheOutcome,
}

/// The runtime an engine lends its restores, built when the first check is loaded (a
/// restore without checks never starts wasmtime): then one wasmtime engine, linker, epoch
/// thread and instance pool for every restore of every holder of a clone, however many a
/// `serve` or a batch runs.
#[derive(Clone)]
pub struct LazyRuntime {
    cache_dir: PathBuf,
    built: Arc<std::sync::Mutex<Option<PluginRuntime>>>,
}

impl LazyRuntime {
    /// A runtime to be built with its compile cache in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> LazyRuntime {
        LazyRuntime {
            cache_dir: cache_dir.into(),
            built: Arc::default(),
        }
    }

    /// The runtime, built now if this is the first asking.
    pub fn get(&self) -> Result<PluginRuntime, Error> {
        let mut built = self.built.lock().expect("no panics under the runtime lock");
        if let Some(runtime) = built.as_ref() {
            return Ok(runtime.clone());
        }
        let runtime = PluginRuntime::new(self.cache_dir.clone())?;
        *built = Some(runtime.clone());
        Ok(runtime)
    }
}

impl PluginRuntime {
    /// A runtime with default settings and its compile cache in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Result<PluginRuntime, Error> {
        PluginRuntime::with_config(RuntimeConfig::new(cache_dir))
    }

    /// Whether both are one runtime.
    pub fn is(&self, other: &PluginRuntime) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn with_config(config: RuntimeConfig) -> Result<PluginRuntime, Error> {
        let (engine, allocation) = build_engine(config.allocation)?;
        let mut linker = Linker::new(&engine);
        let engine_error = |e: wasmtime::Error| Error::Engine {
            reason: format!("{e:#}"),
        };
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        CheckWorld::add_to_linker::<CheckState, HasSelf<CheckState>>(&mut linker, |s| s)
            .map_err(engine_error)?;
        let cache = CompileCache::open(&config.cache_dir)?;
        Ok(PluginRuntime {
            shared: Arc::new(Shared {
                _ticker: start_ticker(engine.clone())?,
                engine,
                linker,
                cache,
                allocation,
                http_client: http::client(),
                http_limits: config.http,
                resolver: config.resolver,
            }),
        })
    }

    /// The allocation strategy in use (pooling may have fallen back).
    pub fn allocation(&self) -> Allocation {
        self.shared.allocation
    }

    /// Loads the component at `path`: reads it, refuses imports outside the
    /// WIT (naming the import), compiles it or takes it from the cache, and
    /// type-checks it against the linker. Do this before a restore starts.
    pub async fn load(&self, path: &Path, limits: CheckLimits) -> Result<Plugin, Error> {
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let wasm = tokio::fs::read(path).await.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        refuse_foreign_imports(path, &wasm)?;
        let runtime = self.clone();
        let owned_path = path.to_owned();
        // Compiling takes 40 ms (Rust) to 5 s (Python): keep it off the
        // async workers.
        let (pre, cache) = tokio::task::spawn_blocking(move || runtime.prepare(&owned_path, &wasm))
            .await
            .expect("plugin compilation does not panic")?;
        tracing::info!(plugin = %name, path = %path.display(), %cache, "loaded check plugin");
        Ok(Plugin {
            runtime: self.clone(),
            pre,
            name,
            path: path.to_owned(),
            limits,
            cache,
        })
    }

    fn prepare(
        &self,
        path: &Path,
        wasm: &[u8],
    ) -> Result<(CheckPre<CheckState>, CacheOutcome), Error> {
        let mismatch = |e: wasmtime::Error| Error::WorldMismatch {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        };
        let (component, cache) =
            self.shared
                .cache
                .load(&self.shared.engine, wasm)
                .map_err(|e| Error::NotAComponent {
                    path: path.to_owned(),
                    reason: format!("{e:#}"),
                })?;
        let instance_pre = self
            .shared
            .linker
            .instantiate_pre(&component)
            .map_err(mismatch)?;
        let pre = CheckPre::new(instance_pre).map_err(mismatch)?;
        Ok((pre, cache))
    }
}

impl Plugin {
    /// The name used in logs: the file stem, unless [`Plugin::named`] set one.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn limits(&self) -> CheckLimits {
        self.limits
    }

    /// How this load found its compiled code.
    pub fn cache_outcome(&self) -> &CacheOutcome {
        &self.cache
    }

    /// The same plugin under another name (a `[[check]]`'s `name`).
    pub fn named(mut self, name: impl Into<String>) -> Plugin {
        self.name = name.into();
        self
    }

    /// Calls the check once in a fresh store. Never fails: a misbehaving
    /// check yields a [`CheckError`] in the returned run.
    pub async fn check(
        &self,
        ctx: &CheckContext,
        config: &BTreeMap<String, String>,
        grants: &CheckGrants,
        host: Arc<dyn CheckHost>,
    ) -> CheckRun {
        let started = Instant::now();
        let shared = &self.runtime.shared;
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let mut store = Store::new(
            &shared.engine,
            CheckState {
                grants: Grants {
                    check: self.name.clone(),
                    restore_id: ctx.restore_id.clone(),
                    ends: std::iter::once(&ctx.target)
                        .chain(&ctx.secondaries)
                        .map(|end| end.name.clone())
                        .collect(),
                    host,
                    egress: Egress::new(
                        shared.http_client.clone(),
                        Arc::clone(&shared.resolver),
                        grants.allow_hosts.clone(),
                        shared.http_limits,
                    ),
                    clock: grants.clock,
                },
                wasi: sandboxed_wasi(&stdout, &stderr, grants.clock),
                table: ResourceTable::new(),
                limiter: CheckLimiter::new(self.limits.memory_bytes),
                cpu_ticks: 0,
                cpu_budget_ticks: self.limits.cpu.as_millis().div_ceil(EPOCH_TICK.as_millis())
                    as u64,
                cpu_exhausted: false,
                logs: Vec::new(),
                dropped_logs: 0,
            },
        );
        store.limiter(|state| &mut state.limiter);
        // Every tick that finds wasm running counts against the CPU budget and
        // yields to tokio, so a spinning guest never pins a worker. Time spent
        // in host calls costs at most the one tick seen on return.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            state.cpu_ticks += 1;
            if state.cpu_ticks > state.cpu_budget_ticks {
                state.cpu_exhausted = true;
                Ok(wasmtime::UpdateDeadline::Interrupt)
            } else {
                Ok(wasmtime::UpdateDeadline::Yield(1))
            }
        });

        let input = ctx.to_wit(config);
        let call = async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            instance.call_check(&mut store, &input).await
        };
        let result = tokio::time::timeout(self.limits.wall, call).await;

        let outcome = match result {
            Err(_elapsed) => Err(CheckError::Timeout {
                limit: self.limits.wall,
            }),
            Ok(Ok(verdict)) => Ok(verdict_from_wit(verdict)),
            Ok(Err(error)) => Err(self.classify(store.data(), &error)),
        };
        let mut state = store.into_data();
        for (pipe, source) in [(&stdout, LogSource::Stdout), (&stderr, LogSource::Stderr)] {
            let output = pipe.contents();
            for line in String::from_utf8_lossy(&output)
                .lines()
                .filter(|l| !l.is_empty())
            {
                let line = LogLine {
                    level: if source == LogSource::Stderr {
                        LogLevel::Warn
                    } else {
                        LogLevel::Info
                    },
                    source,
                    message: line.to_owned(),
                    fields: Vec::new(),
                };
                emit(&self.name, &ctx.restore_id, &line);
                state.push_log(line);
            }
        }
        let run = CheckRun {
            outcome,
            logs: state.logs,
            dropped_logs: state.dropped_logs,
            elapsed: started.elapsed(),
        };
        match &run.outcome {
            Ok(verdict) => {
                tracing::debug!(check = %self.name, ?verdict, elapsed = ?run.elapsed, "check returned")
            }
            Err(error) => {
                tracing::warn!(check = %self.name, %error, elapsed_ms = run.elapsed.as_millis() as u64, "check errored")
            }
        }
        run
    }

    fn classify(&self, state: &CheckState, error: &wasmtime::Error) -> CheckError {
        if let Some(requested) = state.limiter.memory_refused {
            return CheckError::MemoryLimit {
                requested,
                limit: self.limits.memory_bytes,
            };
        }
        if state.cpu_exhausted {
            return CheckError::CpuLimit {
                limit: self.limits.cpu,
            };
        }
        match error.downcast_ref::<Trap>() {
            Some(trap) => CheckError::Trap {
                kind: trap_kind(*trap),
                frame: error
                    .downcast_ref::<wasmtime::WasmBacktrace>()
                    .and_then(|trace| {
                        trace.frames().iter().find_map(|frame| {
                            frame.func_name().map(|name| match frame.module().name() {
                                Some(module) => format!("{name} in {module}"),
                                None => name.to_owned(),
                            })
                        })
                    }),
            },
            None => CheckError::Failed(format!("{error:#}")),
        }
    }
}

fn trap_kind(trap: Trap) -> String {
    match trap {
        Trap::UnreachableCodeReached => "unreachable".to_owned(),
        Trap::MemoryOutOfBounds => "memory out of bounds".to_owned(),
        Trap::StackOverflow => "stack overflow".to_owned(),
        Trap::IntegerDivisionByZero => "integer division by zero".to_owned(),
        other => other.to_string(),
    }
}

fn verdict_from_wit(verdict: wit_types::Verdict) -> Verdict {
    match verdict {
        wit_types::Verdict::Pass => Verdict::Pass,
        wit_types::Verdict::Fail(reason) => Verdict::Fail { reason },
        wit_types::Verdict::RetryAfter(retry) => Verdict::RetryAfter {
            after: Duration::from_millis(retry.after_ms),
            reason: retry.reason,
        },
    }
}

/// WASI with nothing granted: no preopened folders, no environment, no
/// arguments, no sockets or name lookups, stdin closed; stdout and stderr go
/// into bounded in-memory pipes the host logs after the call.
fn sandboxed_wasi(stdout: &MemoryOutputPipe, stderr: &MemoryOutputPipe, clock: Clock) -> WasiCtx {
    let mut builder = WasiCtx::builder();
    builder
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if let Clock::Fixed(at) = clock {
        builder.wall_clock(FixedWallClock(at));
    }
    builder.build()
}

struct FixedWallClock(jiff::Timestamp);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::try_from(self.0.duration_since(jiff::Timestamp::UNIX_EPOCH))
            .unwrap_or(Duration::ZERO)
    }
}

fn engine_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config
}

fn build_engine(allocation: Allocation) -> Result<(Engine, Allocation), Error> {
    if allocation == Allocation::PoolingIfAvailable {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_INSTANCES)
            .total_core_instances(POOL_INSTANCES * MAX_CORE_INSTANCES as u32)
            .total_memories(POOL_INSTANCES)
            .total_tables(POOL_INSTANCES * 4)
            .total_stacks(POOL_INSTANCES)
            .max_core_instances_per_component(MAX_CORE_INSTANCES as u32)
            .max_memories_per_component(MAX_MEMORIES as u32)
            .max_tables_per_component(MAX_TABLES as u32)
            .max_memories_per_module(MAX_MEMORIES as u32)
            .max_tables_per_module(4)
            .table_elements(POOL_TABLE_ELEMENTS)
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20);
        let mut config = engine_config();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        match Engine::new(&config) {
            Ok(engine) => return Ok((engine, Allocation::PoolingIfAvailable)),
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "pooling allocator unavailable on this machine; instantiating on demand"
            ),
        }
    }
    Engine::new(&engine_config())
        .map(|engine| (engine, Allocation::OnDemand))
        .map_err(|e| Error::Engine {
            reason: format!("{e:#}"),
        })
}

/// Drives epochs from a dedicated OS thread, not a tokio task: a guest that
/// pins the only worker would otherwise stop the ticker that is meant to
/// stop it. The thread ends when the runtime (the sender) is dropped.
fn start_ticker(engine: Engine) -> Result<mpsc::Sender<()>, Error> {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("lockstep-epoch".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                engine.increment_epoch();
            }
        })
        .map_err(|e| Error::Engine {
            reason: format!("cannot start the epoch thread: {e}"),
        })?;
    Ok(stop)
}
