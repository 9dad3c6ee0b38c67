#!/usr/bin/env bash
# The test suite: the plugin components, every crate's tests (unit, integration, end to end
# against milvus-sim), the pytest suite with the real pymilvus, and the binary against a real
# Milvus 2.3.5. `.ci/run` installs what
# this needs and starts moto and etcd first; on a machine where that was done once, run this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash plugins/build.sh
# Everything from here on is linked statically (glibc included), for the target named
# explicitly so that the flag stays off build scripts and proc macros, which cannot be
# static: the image operators::image runs is made of the lockstep built here, and a static
# build of its own would compile lockstep and all it depends on a second time. The binaries
# land in target/x86_64-unknown-linux-gnu/debug.
export CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu RUSTFLAGS="-C target-feature=+crt-static"
# Absolute, since the scripts given its binaries below run them from directories of their own.
bin="$(realpath -m "${CARGO_TARGET_DIR:-target}/$CARGO_BUILD_TARGET/debug")"
# The end-to-end tests and the pytest suite run the built binaries; the crash and fault tests
# need lockstep's crash points, named here rather than left to feature unification.
cargo build --workspace --bins --features lockstep/fault-injection
# The real-Milvus tests below run copies of the binaries just built: nextest's build links
# $bin/lockstep again (with the features the tests unify), and must not replace it
# under a test that runs it.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp "$bin/lockstep" "$bin/milvus-sim" "$scratch/"
# The OCI image whose filesystem operators::image runs (scripts/image.sh), of that lockstep.
bash scripts/image.sh --binary "$bin/lockstep" >"$scratch/image.log" 2>&1 \
    || { cat "$scratch/image.log"; exit 1; }
# Every test binary is built before the real Milvus starts below, so that its server does not
# come up on two cores busy compiling.
cargo nextest run --workspace --no-run
# The binary against a real Milvus 2.3.5 on the suite's etcd (tests/real-milvus/README.md),
# beside everything else: its 13 minutes are nearly all the server's own waits (one core
# stays 90 % idle). Its output comes at the end.
# A process group of its own, so that a step failing before it ends can stop it: on SIGTERM
# pytest's teardown stops the server it started (tests/real-milvus/conftest.py).
(export LOCKSTEP_BIN="$scratch/lockstep" MILVUS_SIM_BIN="$scratch/milvus-sim"
    exec setsid .venv-milvus23/bin/pytest -q tests/real-milvus >"$scratch/real-milvus.log" 2>&1) &
real_milvus=$!
# (The group exists once the subshell has called setsid; until then, the subshell is signalled.)
trap 'kill -TERM -- "-$real_milvus" 2>/dev/null || kill -TERM "$real_milvus" 2>/dev/null || true
    rm -rf "$scratch"' EXIT
# fuzz/tests/mutate.rs fuzzes each parser this many seconds from its named seeds.
LOCKSTEP_FUZZ_SECS=10 cargo nextest run --workspace --no-fail-fast
# Seeded fault schedules over whole restores, DESIGN.md §2 checked after each (issue 6).
# Each seed has a world of its own; two at once keep CI under 40 minutes.
cargo run -q -p e2e --bin faults -- --seeds 1..51 --parallel 2
# Fleet schedules: stale hosts paused past their lease and woken, takeovers killed, etcd
# restarted (issue 26). Their runs mostly wait out leases, so three run at once.
cargo run -q -p e2e --bin faults -- --fleet --seeds 1..31 --parallel 3
MILVUS_SIM_BIN="$bin/milvus-sim" .venv/bin/pytest -q tests/milvus-sim/pytest
# schemathesis holds `serve` to its own OpenAPI document, every check (issue 15).
LOCKSTEP_BIN="$bin/lockstep" tests/schemathesis/run.sh 45
real_milvus_status=0
wait "$real_milvus" || real_milvus_status=$?
trap - EXIT
echo "== real Milvus 2.3.5 (tests/real-milvus)"
cat "$scratch/real-milvus.log"
rm -rf "$scratch"
exit "$real_milvus_status"
