#!/usr/bin/env bash
# Instructions the server executes per A1 step (callgrind), a figure that does not move with the
# machine's load or speed: A1 with 3 runs of 10 and of LONG (20) steps under valgrind, the
# difference of the two totals divided by the extra steps. Also what a run costs beyond its
# steps (a fresh thread's records, sandbox and folders, the chain, the HTTP request, the run's
# own bookkeeping): 6 runs of 10 steps against 3, less 10 steps each. A1's CPU per step counts both
# (its runs are 10 steps long). Under valgrind the sandbox cannot set up its
# namespaces, so bash runs from the server itself (the in-process path): compare builds with
# this script, not with production figures.
#   crates/antler-bench/scripts/a1_instructions.sh [ANTLER_BINARY]
# KEEP=DIR keeps the callgrind profiles there (cg.STEPS.PID) for callgrind_annotate.
# LONG=N makes the longer runs N steps (default 20): the per-step figure moves ±3% from run to
# run over 3 × 10 extra steps and ±1% over 3 × 40 (LONG=50); compare builds at the same LONG.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
bin=${1:-$T/antler}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/antler"
# shellcheck source=traced.sh
. "$root/crates/antler-bench/scripts/traced.sh"
traced_wrapper "$work" 'cg.$STEPS.%p'
long=${LONG:-20}
if ! [ "$long" -gt 10 ] 2>/dev/null; then
    echo "LONG must be a number of steps above 10" >&2
    exit 2
fi
for rs in 3x10 "3x$long" 6x10; do
    STEPS=$rs "$T/antler-bench" --serve --antler "$work/traced" --workloads a1 --samples 1 \
        --runs "${rs%x*}" --steps "${rs#*x}" >/dev/null
done
total() { callgrind_annotate "$work"/cg."$1".* 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/; fi
a=$(total 3x10)
b=$(total "3x$long")
c=$(total 6x10)
step=$(((b - a) / (3 * (long - 10))))
echo "server instructions per A1 step: $step"
echo "server instructions per A1 run beyond its steps: $(((c - a) / 3 - 10 * step))"
