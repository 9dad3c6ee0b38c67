#!/usr/bin/env bash
# Builds every example check into plugins/dist/*.wasm, the files the host's
# plugin tests and benchmark load. CI runs this before the tests.
#
# Needs: the wasm32-wasip2 Rust target (added here when rustup is present) and
# componentize-py (`pip install componentize-py`; found on PATH, in
# $COMPONENTIZE_PY, or in the repository's .venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
dist="$here/dist"
wit="$root/wit/lockstep-plugin@0.1.0"
mkdir -p "$dist"

if command -v rustup >/dev/null; then
    rustup target add wasm32-wasip2 >/dev/null
fi

echo "building Rust checks"
cargo build --manifest-path "$here/Cargo.toml" --release --target wasm32-wasip2
for crate in storage-probe approval-gate test-guest foreign-import; do
    cp "$here/target/wasm32-wasip2/release/${crate//-/_}.wasm" "$dist/$crate.wasm"
done

echo "building the template check"
cargo build --manifest-path "$root/examples/plugins/template/Cargo.toml" \
    --target-dir "$here/target" --release --target wasm32-wasip2
cp "$here/target/wasm32-wasip2/release/my_check.wasm" "$dist/template.wasm"

componentize_py="${COMPONENTIZE_PY:-}"
if [[ -z "$componentize_py" ]]; then
    if command -v componentize-py >/dev/null; then
        componentize_py=componentize-py
    elif [[ -x "$root/.venv/bin/componentize-py" ]]; then
        componentize_py="$root/.venv/bin/componentize-py"
    else
        echo "componentize-py not found: pip install componentize-py (or set COMPONENTIZE_PY)" >&2
        exit 1
    fi
fi

echo "building the Python check (change-window)"
python3 -m unittest discover -s "$here/change-window" -p '*_test.py'
(cd "$here/change-window" &&
    "$componentize_py" -d "$wit" -w check componentize app -o "$dist/change-window.wasm")

ls -l "$dist"
