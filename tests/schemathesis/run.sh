#!/usr/bin/env bash
# schemathesis against `lockstep serve` on loopback, every check, twice: as started without a
# token (the document asks for none) and with a restore token and a read token (the document
# asks for them, and schemathesis's auth checks try the routes without the restore token it
# sends and with a wrong one). Tokens are 16 bytes or more, as serve requires; schemathesis
# sends JSON bodies and names the server as it listens, as serve requires too. The state is
# what `lockstep demo --dir` leaves: a backup, a finished restore in the journal, and host
# config clusters that are no longer running, so a restore request is refused or fails
# quickly instead of restoring. The built-in negative_data_rejection is replaced by
# hooks.py's envelope-aware one (see there). Each pass is bounded by --max-time.
#
# Usage: tests/schemathesis/run.sh [SECONDS_PER_PASS]   (default 45; LOCKSTEP_BIN: the binary)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-45}"
lockstep="${LOCKSTEP_BIN:-$root/target/debug/lockstep}"
st="${SCHEMATHESIS:-$root/.venv-schemathesis/bin/schemathesis}"

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

"$lockstep" demo --dir "$work/demo" >"$work/demo.log" 2>&1 || {
    cat "$work/demo.log" >&2
    exit 1
}

# A free loopback port for each pass, chosen by the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pass() {
    local name="$1"
    shift
    local port
    port="$(free_port)"
    (cd "$work/demo" && exec "$lockstep" serve --config lockstep.toml --listen "127.0.0.1:$port" "$@") \
        >"$work/serve-$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break
        sleep 0.1
    done
    local auth=()
    if [[ -n "${LOCKSTEP_API_TOKEN:-}" && "$name" == token ]]; then
        auth=(-H "Authorization: Bearer $LOCKSTEP_API_TOKEN")
    fi
    echo "== schemathesis, serve $name (${seconds}s)"
    # One worker: schemathesis's workers are threads, and CPython 3.11 keeps ast.parse's
    # recursion depth per interpreter, so two threads describing strategies at once can
    # fail with "AST constructor recursion depth mismatch" (cpython gh-106905). CI hit it.
    SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$here" "$st" run \
        "http://127.0.0.1:$port/api/v1/openapi.json" --url "http://127.0.0.1:$port" \
        "${auth[@]}" --checks all --exclude-checks negative_data_rejection \
        --max-time "$seconds" --workers 1 --seed 1 || {
        echo "serve's log:" >&2
        tail -50 "$work/serve-$name.log" >&2
        return 1
    }
}

token() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }

pass no-token
export LOCKSTEP_API_TOKEN="schemathesis-$(token)" LOCKSTEP_READ_TOKEN="schemathesis-read-$(token)"
pass token --token-env LOCKSTEP_API_TOKEN --read-token-env LOCKSTEP_READ_TOKEN
