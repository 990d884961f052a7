#!/usr/bin/env bash
# Regenerate link-order.txt: the functions of `antler` that a cold `antler run` and the server
# workloads of antler-bench execute, hottest first (valgrind's callgrind counts them).
#
# Symbol names carry a hash of their crate's build metadata, and cargo's metadata depends on
# which packages a command selects (features are unified across them), so the list holds the
# names of each way the binary is usually built: the README's `cargo run --release --bin
# antler` (the whole workspace selected) and the benchmarks' `-p antler-cli -p antler-bench`.
# Names a build does not have are skipped by the linker: a stale list, or another build
# command, only costs resident memory, never correctness. Regenerate after dependency or
# feature changes. Needs valgrind; builds both ways (release, several minutes each):
#   crates/antler-cli/link-order.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=../antler-bench/scripts/traced.sh
. "$root/crates/antler-bench/scripts/traced.sh"

profile() { # $1: output list
    rm -f "$work"/cg.* && cp "$T/antler" "$work/antler" && cp "$T/antler-bench" "$work/bench"
    traced_wrapper "$work" 'cg.%p' --demangle=no
    (
        cd "$work"
        ./bench --cold --antler "$work/traced" --samples 2 >/dev/null
        ./bench --serve --antler "$work/traced" --samples 1 --runs 2 --steps 3 --history 100 \
            --threads 10 --thread-steps 2 --c-samples 1 --e-steps 6 >/dev/null
        ./bench --serve --antler "$work/traced" --workloads a1,b --mode stream --samples 1 \
            --runs 2 --steps 3 --history 100 >/dev/null
    )
    # valgrind names the functions of the linker's `.text.promoted` section (build.rs) but
    # not their object ("???"): keep those lines too; names `antler` lacks are skipped at link.
    for f in "$work"/cg.*; do
        callgrind_annotate --threshold=100 --inclusive=no "$f" 2>/dev/null |
            grep -F -e "[$work/antler]" -e "[???]" || true
    done | python3 -c '
import collections, re, sys
ir = collections.Counter()
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+(.*) \[", line)
    if not m:
        continue
    name = re.sub(r"\x27\d+$", "", m.group(2).split(":", 1)[-1])  # recursion marks: name'"'"'N
    if not name.startswith(("0x", "(")):
        ir[name] += int(m.group(1).replace(",", ""))
for name, _ in ir.most_common():
    print(name)
' > "$1"
}

n=0
while read -r selection; do
    n=$((n + 1))
    # shellcheck disable=SC2086 # the selection is a list of cargo arguments
    (cd "$root" && cargo build --release $selection)
    profile "$work/list.$n"
    echo "cargo build --release $selection: $(wc -l < "$work/list.$n") functions"
done <<'BUILDS'
--bin antler --bin antler-bench
-p antler-cli -p antler-bench
BUILDS
# The first build's names first; each later build adds the names the earlier ones lack.
awk '!seen[$0]++' "$work"/list.* > "$here/link-order.txt"
echo "link-order.txt: $(wc -l < "$here/link-order.txt") names"
