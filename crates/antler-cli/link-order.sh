#!/usr/bin/env bash
# Regenerate link-order.txt: the functions of `antler` that a cold `antler run` and the server
# workloads of antler-bench execute, hottest first (valgrind's callgrind counts them). Run it
# after large changes (new dependencies, renamed hot paths); a stale list only costs resident
# memory, never correctness. Needs valgrind and a release build:
#   cargo build --release -p antler-cli -p antler-bench && crates/antler-cli/link-order.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${CARGO_TARGET_DIR:-$here/../../target}/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$T/antler" "$work/antler"
cat > "$work/traced" <<WRAP
#!/usr/bin/env bash
# The sandbox helper runs untraced (namespaces and Landlock do not mix with valgrind).
if [ "\${1:-}" = sandbox-exec ]; then exec "$work/antler" "\$@"; fi
# Under valgrind the process's own path is valgrind's: name the helper, so bash runs as it does
# in production (through the warden).
export ANTLER_SANDBOX_HELPER="$work/antler"
exec valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.%p" "$work/antler" "\$@"
WRAP
chmod +x "$work/traced"
cd "$work"
"$T/antler-bench" --cold --antler "$work/traced" --samples 2 >/dev/null
"$T/antler-bench" --serve --antler "$work/traced" --samples 1 --runs 2 --steps 3 --history 100 \
    --threads 10 --thread-steps 2 --c-samples 1 --e-steps 6 >/dev/null
"$T/antler-bench" --serve --antler "$work/traced" --workloads a1,b --mode stream --samples 1 \
    --runs 2 --steps 3 --history 100 >/dev/null
for f in "$work"/cg.*; do
    callgrind_annotate --threshold=100 --inclusive=no "$f" 2>/dev/null | grep -F "[$work/antler]" || true
done | python3 -c '
import collections, re, sys
ir = collections.Counter()
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+(.*) \[", line)
    if not m:
        continue
    name = m.group(2).split(":", 1)[-1]
    name = re.sub(r"\x27\d+$", "", name)  # callgrind marks recursion depth as name'"'"'N
    if name.startswith(("0x", "(")):
        continue
    ir[name] += int(m.group(1).replace(",", ""))
for name, _ in ir.most_common():
    print(name)
' > "$here/link-order.txt"
echo "link-order.txt: $(wc -l < "$here/link-order.txt") functions"
