#!/usr/bin/env bash
# Installs the reference MCP server the antler-mcp and antler-cli tests talk to
# (`@modelcontextprotocol/server-everything`, pinned) into a cache folder, once.
# Fast when already installed. Tests find it in $ANTLER_MCP_PEERS (default below) and skip
# with a printed reason only when `node` is absent.
set -euo pipefail

VERSION="2026.8.31"
DIR="${ANTLER_MCP_PEERS:-$HOME/.cache/antler-mcp-peers}"
ENTRY="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "antler-mcp peers: node/npm not found; MCP peer tests will be skipped"
  exit 0
fi

if [ -f "$ENTRY" ] && [ -f "$DIR/.version" ] && [ "$(cat "$DIR/.version")" = "$VERSION" ]; then
  echo "antler-mcp peers: server-everything $VERSION already in $DIR"
  exit 0
fi

mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"antler-mcp-peers","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-everything@$VERSION"
echo "$VERSION" > .version
echo "antler-mcp peers: server-everything $VERSION installed in $DIR"
