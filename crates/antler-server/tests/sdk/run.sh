#!/usr/bin/env bash
# The langgraph-sdk client test: installs the official Python `langgraph-sdk` from PyPI into a
# fresh venv, starts `mock_openai` (scripted OpenAI-compatible model) and `antler serve` on
# 127.0.0.1 with an API key, runs sdk_test.py against /api/langgraph, and cleans up.
# Exits non-zero on any failure. Env: CARGO_TARGET_DIR (default <repo>/target),
# ANTLER_SDK_VENV (reuse an existing venv instead of creating one).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/antler-sdk.XXXXXX")
MOCK_PID=""
SERVER_PID=""

cleanup() {
    local code=$?
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
    [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null || true
    if [[ $code -ne 0 ]]; then
        echo "--- antler serve log ---" >&2
        tail -n 50 "$WORK/antler.log" >&2 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit $code
}
trap cleanup EXIT

echo "sdk test: building antler and mock_openai"
(cd "$ROOT" && cargo build -q -p antler-cli -p antler-test-support --bins)

if [[ -n "${ANTLER_SDK_VENV:-}" ]]; then
    VENV=$ANTLER_SDK_VENV
else
    VENV=$WORK/venv
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "sdk test: creating a venv and installing langgraph-sdk"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "langgraph-sdk>=0.4,<0.5"
fi
"$VENV/bin/python" -c 'import langgraph_sdk, importlib.metadata as m; print("sdk test: langgraph-sdk", m.version("langgraph-sdk"))'

"$TARGET/debug/mock_openai" --port-file "$WORK/mock.port" >"$WORK/mock.log" 2>&1 &
MOCK_PID=$!
for _ in $(seq 100); do [[ -s "$WORK/mock.port" ]] && break; sleep 0.1; done
MOCK_PORT=$(cat "$WORK/mock.port")

cat >"$WORK/config.yaml" <<EOF
models:
  - name: main
    use: langchain_openai:ChatOpenAI
    model: mock-model
    base_url: http://127.0.0.1:$MOCK_PORT/v1
    api_key: sk-test
    streaming: true
tools:
  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
EOF

PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KEY=sdk-test-key-0123456789
ANTLER_HOME="$WORK/home" ANTLER_API_KEY=$KEY \
    "$TARGET/debug/antler" serve --config "$WORK/config.yaml" --host 127.0.0.1 --port "$PORT" \
    >"$WORK/antler.log" 2>&1 &
SERVER_PID=$!
"$VENV/bin/python" - "$PORT" <<'EOF'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/health"
for _ in range(300):
    try:
        urllib.request.urlopen(url, timeout=1).read()
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit("antler serve did not come up")
EOF

echo "sdk test: running against http://127.0.0.1:$PORT/api/langgraph"
"$VENV/bin/python" "$HERE/sdk_test.py" --url "http://127.0.0.1:$PORT/api/langgraph" --api-key "$KEY"
