#!/usr/bin/env bash
# Code-layout guard for D's peak RSS: how much of `antler`'s text a cold 0-step run touches,
# counted in the 64 KiB blocks the kernel maps around a faulting page. callgrind lists the
# functions the run executes; `nm` gives their addresses. With the functions of
# `crates/antler-cli/link-order.txt` packed at the start of `.text`, a run touches ~6 MiB; a
# list gone stale (functions added on the path since it was made, laid out elsewhere) leaves
# islands all over the 31 MiB text, each costing a block (2026-12-07: 9.1 MiB of blocks and
# 16.5 MiB peak RSS, against 6.1 and 14.0 after regenerating the list). The figure depends on
# the code a run executes and where the linker put it, not on the machine's speed or kernel.
# Fails when it is over TEXT_BUDGET_MIB (default 7.0): regenerate the list
# (crates/antler-cli/link-order.sh) and rebuild.
#   crates/antler-bench/scripts/text_layout.sh [ANTLER_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
bin=${1:-$T/antler}
budget=${TEXT_BUDGET_MIB:-7.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/antler"
# shellcheck source=traced.sh
. "$root/crates/antler-bench/scripts/traced.sh"
traced_wrapper "$work" 'cg.%p' --demangle=no
"$T/antler-bench" --cold --antler "$work/traced" --samples 1 >/dev/null
# valgrind names the functions of `.text.promoted` (crates/antler-cli/build.rs) without their
# object ("???"); `nm` decides which names are antler's.
for f in "$work"/cg.*; do
    callgrind_annotate --threshold=100 --inclusive=no "$f" 2>/dev/null | grep -F -e "[$work/antler]" -e "[???]" || true
done >"$work/executed"
nm -S --defined-only "$work/antler" >"$work/symbols"
python3 - "$work/executed" "$work/symbols" "$budget" <<'PY'
import re, sys
executed, symbols, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = set()
for line in open(executed):
    m = re.match(r"\s*[\d,]+ \(.*?\)\s+(.*) \[", line)
    if m:
        names.add(re.sub(r"'\d+$", "", m.group(1).split(":", 1)[-1]))
where = {}
for line in open(symbols):
    p = line.split()
    if len(p) == 4 and p[2] in "tT":
        where[p[3]] = (int(p[0], 16), int(p[1], 16))
found = [where[n] for n in names if n in where]
if len(found) < 1000:
    sys.exit(f"text layout: only {len(found)} executed functions resolved; is valgrind working?")
block = 64 * 1024
blocks = {b for a, s in found for b in range(a // block, (a + max(s, 1) - 1) // block + 1)}
mib = len(blocks) * block / 2**20
code = sum(s for _, s in found) / 2**20
print(f"text a cold 0-step run touches: {mib:.2f} MiB in 64 KiB blocks "
      f"({len(found)} functions, {code:.2f} MiB of code); budget {budget:.2f} MiB")
if mib > budget:
    sys.exit("over budget: regenerate crates/antler-cli/link-order.txt (link-order.sh) and rebuild")
PY
