//! A check's memory limit holds every memory and table of its instance together. The
//! components here are written by hand: a core module in WAT (several memories, a
//! table, growth on request) wrapped by `wit-component` into a component of the real
//! check world, since no guest language makes a second memory on purpose. Each case
//! runs on both allocators, so the limiter, not the pool's sizes, is what refuses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lockstep::plugins::{
    Allocation, CheckError, CheckGrants, CheckLimits, CheckRun, Phase, Plugin, PluginRuntime,
    RuntimeConfig, Verdict,
};

use super::support::{context, no_storage};

const PAGE: usize = 64 * 1024;

/// What the hand-written check is made of, and what its `check` grows before it passes.
struct Shape {
    /// Initial pages of each memory after the first (the one the canonical ABI uses,
    /// one page).
    extra_memories: &'static [u32],
    table_elements: u32,
    /// `(memory index, pages)` grown in order; a refused growth is `unreachable`.
    grow_memories: &'static [(u32, u32)],
    grow_table: u32,
}

impl Shape {
    /// The core module: a bump `cabi_realloc` in memory 0 for the host's copy of the
    /// context, and a `check` that grows what it is told to and returns `pass` (a
    /// verdict whose discriminant byte, at address 0, is 0).
    fn wat(&self) -> String {
        let memories: String = (self.extra_memories.iter())
            .map(|pages| format!("(memory {pages})\n"))
            .collect();
        let mut grows: String = (self.grow_memories.iter())
            .map(|(memory, pages)| {
                format!(
                    "(if (i32.lt_s (memory.grow {memory} (i32.const {pages})) (i32.const 0)) \
                     (then unreachable))\n"
                )
            })
            .collect();
        if self.grow_table > 0 {
            grows += &format!(
                "(if (i32.lt_s (table.grow 0 (ref.null func) (i32.const {})) (i32.const 0)) \
                 (then unreachable))\n",
                self.grow_table
            );
        }
        format!(
            r#"(module
                (memory (export "memory") 1)
                {memories}
                (table {table} funcref)
                (global $next (mut i32) (i32.const 64))
                (func (export "cabi_realloc")
                    (param $old i32) (param $old_size i32) (param $align i32) (param $size i32)
                    (result i32)
                    (local $at i32)
                    (local.set $at
                        (i32.and (i32.add (global.get $next) (i32.sub (local.get $align) (i32.const 1)))
                                 (i32.sub (i32.const 0) (local.get $align))))
                    (global.set $next (i32.add (local.get $at) (local.get $size)))
                    (if (i32.gt_u (global.get $next) (i32.const {PAGE})) (then unreachable))
                    (local.get $at))
                (func (export "check") (param i32) (result i32)
                    {grows}
                    (i32.store8 (i32.const 0) (i32.const 0))
                    (i32.const 0)))"#,
            table = self.table_elements,
        )
    }

    /// The module wrapped as a component of the check world, written into `dir`.
    fn component(&self, dir: &Path) -> PathBuf {
        let mut module = wat::parse_str(self.wat()).expect("the module's WAT parses");
        let mut resolve = wit_parser::Resolve::default();
        let (package, _) = resolve
            .push_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/lockstep-plugin@0.1.0"))
            .expect("the WIT parses");
        let world = resolve
            .select_world(&[package], Some("check"))
            .expect("world check");
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
        )
        .expect("metadata embeds");
        let component = wit_component::ComponentEncoder::default()
            .module(&module)
            .expect("the module is a check")
            .validate(true)
            .encode()
            .expect("the component encodes");
        let path = dir.join("shaped.wasm");
        std::fs::write(&path, component).expect("write the component");
        path
    }
}

const ALLOCATIONS: [Allocation; 2] = [Allocation::PoolingIfAvailable, Allocation::OnDemand];

fn runtime_on(allocation: Allocation, dir: &Path) -> PluginRuntime {
    PluginRuntime::with_config(RuntimeConfig {
        allocation,
        ..RuntimeConfig::new(dir.join("cache"))
    })
    .expect("runtime")
}

fn limits(memory_bytes: usize) -> CheckLimits {
    CheckLimits {
        memory_bytes,
        cpu: Duration::from_secs(1),
        wall: Duration::from_secs(10),
    }
}

async fn call(plugin: &Plugin) -> CheckRun {
    plugin
        .check(
            &context(Phase::BeforeCommit),
            &Default::default(),
            &CheckGrants::default(),
            no_storage(),
        )
        .await
}

/// Calls the check of `shape` once with `limit` bytes of memory, on each allocator.
async fn call_on_each_allocator(shape: &Shape, limit: usize) -> Vec<(Allocation, CheckRun)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = shape.component(dir.path());
    let mut runs = Vec::new();
    for allocation in ALLOCATIONS {
        let runtime = runtime_on(allocation, dir.path());
        let plugin = runtime.load(&path, limits(limit)).await.expect("loads");
        runs.push((runtime.allocation(), call(&plugin).await));
    }
    runs
}

/// Every run hit the memory limit, asking for more than `limit` in total.
fn assert_memory_limit(runs: &[(Allocation, CheckRun)], limit: usize) {
    for (allocation, run) in runs {
        match &run.outcome {
            Err(
                error @ CheckError::MemoryLimit {
                    requested,
                    limit: l,
                },
            ) => {
                assert_eq!(*l, limit, "{allocation:?}");
                assert!(requested > l, "{allocation:?}: {error}");
                assert!(error.to_string().starts_with("memory limit"), "{error}");
            }
            other => panic!("{allocation:?}: expected the memory limit, got {other:?}"),
        }
    }
}

fn assert_pass(runs: &[(Allocation, CheckRun)]) {
    for (allocation, run) in runs {
        assert_eq!(run.outcome, Ok(Verdict::Pass), "{allocation:?}");
    }
}

const LIMIT: usize = 16 * PAGE;

/// Two memories of 8 and 9 pages: each under a 16-page limit, 17 pages together.
#[tokio::test]
async fn memories_each_under_the_limit_are_refused_together_over_it() {
    let shape = Shape {
        extra_memories: &[1],
        table_elements: 1,
        grow_memories: &[(0, 7), (1, 8)],
        grow_table: 0,
    };
    assert_memory_limit(&call_on_each_allocator(&shape, LIMIT).await, LIMIT);
    // The same growth fits a limit of 17 pages and a bit (the one-element table).
    assert_pass(&call_on_each_allocator(&shape, 18 * PAGE).await);
}

/// Memories too big together are refused as the instance is made, before `check` runs.
#[tokio::test]
async fn initial_memories_together_over_the_limit_are_refused_at_instantiation() {
    let shape = Shape {
        extra_memories: &[8, 8],
        table_elements: 1,
        grow_memories: &[],
        grow_table: 0,
    };
    assert_memory_limit(&call_on_each_allocator(&shape, LIMIT).await, LIMIT);
}

/// 40 000 table elements count as 320 000 bytes (a pointer each), past a 256 KiB limit
/// the one-page memory leaves 192 KiB of.
#[tokio::test]
async fn a_table_grown_past_the_limit_is_refused() {
    let grown = Shape {
        extra_memories: &[],
        table_elements: 1,
        grow_memories: &[],
        grow_table: 40_000,
    };
    assert_memory_limit(&call_on_each_allocator(&grown, 4 * PAGE).await, 4 * PAGE);
    let within = Shape {
        grow_table: 10_000,
        ..grown
    };
    assert_pass(&call_on_each_allocator(&within, 4 * PAGE).await);
}

/// More memories than a check may have, however small, are refused: at load by the
/// pooling allocator (it sizes its slots by the same count), else as the instance is made.
#[tokio::test]
async fn more_memories_than_allowed_are_refused() {
    let shape = Shape {
        extra_memories: &[1, 1, 1, 1],
        table_elements: 1,
        grow_memories: &[],
        grow_table: 0,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = shape.component(dir.path());
    for allocation in ALLOCATIONS {
        let runtime = runtime_on(allocation, dir.path());
        let refusal = match runtime.load(&path, limits(LIMIT)).await {
            Err(error) => error.to_string(),
            Ok(plugin) => match call(&plugin).await.outcome {
                Err(CheckError::Failed(reason)) => reason,
                other => panic!("{allocation:?}: expected a refusal, got {other:?}"),
            },
        };
        assert!(
            refusal.contains("memories count of 5")
                || refusal.contains("memory count too high at 5"),
            "{allocation:?}: {refusal}"
        );
    }
}
