#!/usr/bin/env bash
# Instructions the server executes per B step (callgrind) at 10 messages and at HISTORY
# messages (default 1000), figures that do not move with the machine's load or speed. B runs
# 10-message and HISTORY-message threads; two B runs of 10 and of 20 steps per run give
# 2·runs·10·c10 (HISTORY=10) and runs·10·(c10 + cH). As in a1_instructions.sh, bash runs from
# the server itself under valgrind: compare builds with this script, not with production figures.
#   crates/antler-bench/scripts/b_instructions.sh [ANTLER_BINARY]
# KEEP=DIR keeps the callgrind profiles there (cg.HISTORY.STEPS.PID) for callgrind_annotate.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
bin=${1:-$T/antler}
hist=${HISTORY:-1000}
runs=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/antler"
# shellcheck source=traced.sh
. "$root/crates/antler-bench/scripts/traced.sh"
traced_wrapper "$work" 'cg.$TAG.%p'
for h in 10 "$hist"; do
    for s in 10 20; do
        TAG=$h.$s "$T/antler-bench" --serve --antler "$work/traced" --workloads b --samples 1 \
            --runs "$runs" --steps "$s" --history "$h" >/dev/null
    done
done
total() { callgrind_annotate "$work"/cg."$1".* 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/; fi
short=$(($(total 10.20) - $(total 10.10)))
long=$(($(total "$hist".20) - $(total "$hist".10)))
c10=$((short / (2 * runs * 10)))
ch=$((long / (runs * 10) - c10))
echo "server instructions per B step: $c10 at 10 messages, $ch at $hist ($(awk "BEGIN {printf \"%.2f\", $ch / $c10}")×)"
