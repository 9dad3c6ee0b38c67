#!/usr/bin/env bash
# A fleet on one machine, for trying it out: etcd on loopback and three `lockstep watch`
# members on one job directory, each with its own state directory for its reports.
#   examples/serve/fleet.sh HOST_CONFIG JOB_DIR
# Drop job files into JOB_DIR; each runs on exactly one member. Kill one member (kill -9)
# in the middle of a restore: another takes it over ~lease_ttl seconds later.
set -euo pipefail
config="${1:?host config}"; jobs="${2:?job directory}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
etcd --data-dir "$work/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 >"$work/etcd.log" 2>&1 &
sleep 1
for n in 1 2 3; do
    lockstep --config "$config" --journal "etcd://127.0.0.1:2379/lockstep/demo?lease_ttl=5" \
        --state-dir "$work/member-$n" watch "$jobs" 2> >(sed "s/^/[member $n] /" >&2) &
done
echo "fleet of 3 watching $jobs; reports in $work/member-*/reports (Ctrl-C stops it)"
wait
