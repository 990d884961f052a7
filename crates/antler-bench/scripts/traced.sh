# Sourced by the profiling scripts: traced_wrapper DIR OUT [VALGRIND_OPTION...] writes
# DIR/traced, which runs DIR/antler under callgrind with its profile written to DIR/OUT (OUT
# may name environment variables the wrapper reads when it runs, as '$STEPS' in single
# quotes; %p is the pid). The sandbox helper runs untraced (namespaces and Landlock do not mix
# with valgrind); under valgrind the process's own path is valgrind's, so the helper is named
# and bash runs as it does in production (through the warden).
traced_wrapper() {
    local dir=$1 out=$2
    shift 2
    cat >"$dir/traced" <<WRAP
#!/usr/bin/env bash
if [ "\${1:-}" = sandbox-exec ]; then exec "$dir/antler" "\$@"; fi
export ANTLER_SANDBOX_HELPER="$dir/antler"
exec valgrind --tool=callgrind $* --callgrind-out-file="$dir/$out" "$dir/antler" "\$@"
WRAP
    chmod +x "$dir/traced"
}
