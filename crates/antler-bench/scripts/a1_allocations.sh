#!/usr/bin/env bash
# Heap allocations the server makes per A1 step (heaptrack), with bash run as in production
# (through the sandbox's warden, which valgrind-based `a1_instructions.sh` cannot do): A1 with 5
# runs of 10 and of 20 steps under heaptrack, the difference of the two allocation-call counts
# divided by the 50 extra steps, in three rounds (median and each round printed). The count
# repeats within a few allocations from run to run of one build, so it compares builds on a
# machine whose CPU figures are noisy.
#   crates/antler-bench/scripts/a1_allocations.sh [ANTLER_BINARY]
# heaptrack sees the calls that reach the system allocator: since `antler` has its own block
# cache in front (antler-alloc, 2026-12-07), that is its misses, blocks over 4 KiB and SQLite's
# own allocations (~105 per step then, against ~513 Rust allocations); the Rust-level count per
# step is `cargo test -p antler-bench --test alloc_guard`'s.
# KEEP=DIR keeps the heaptrack files there (ht.ROUND.STEPS.zst) for `heaptrack_print -a`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
bin=${1:-$T/antler}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/antler"
# Three rounds, the median reported: the count repeats from run to run of one build, but a
# round can land a background write (a WAL checkpoint, a journal batch) on the other side.
per_step=()
for round in 1 2 3; do
    calls=()
    for s in 10 20; do
        cat > "$work/traced" <<WRAP
#!/usr/bin/env bash
if [ "\${1:-}" = sandbox-exec ]; then exec "$work/antler" "\$@"; fi
exec heaptrack -o "$work/ht.$round.$s" "$work/antler" "\$@"
WRAP
        chmod +x "$work/traced"
        "$T/antler-bench" --serve --antler "$work/traced" --workloads a1 --samples 1 --runs 5 \
            --steps "$s" >/dev/null 2>&1
        # The bench's SIGTERM does not reach the server through heaptrack: end it here.
        pkill -f "heaptrack -o $work/ht.$round.$s" || true
        pkill -f "$work/antler serve" || true
        # heaptrack writes its file once the server has gone.
        while pgrep -f "$work/(antler serve|ht\.$round\.$s)" >/dev/null; do sleep 0.2; done
        calls+=("$(heaptrack_print "$work/ht.$round.$s".* 2>/dev/null |
            awk '/^calls to allocation functions:/ {print $5}')")
    done
    per_step+=($(((calls[1] - calls[0]) / 50)))
done
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/ht.* "$KEEP"/; fi
median=$(printf '%s\n' "${per_step[@]}" | sort -n | sed -n 2p)
echo "server allocations per A1 step: $median (rounds: ${per_step[*]})"
