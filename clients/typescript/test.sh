#!/usr/bin/env bash
# Builds the TypeScript client (its types generated from internal/httpapi/openapi.json),
# starts a `delayq serve` built from this tree on a free loopback port with
# a throwaway data directory, runs the client's tests against it over HTTP,
# and stops it. Needs Node ≥ 20 with npm, and Go.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
  echo "clients/typescript/test.sh: node and npm are needed (Node ≥ 20)" >&2
  exit 1
}

npm ci --no-audit --no-fund --loglevel=error
npm run --silent build

# shellcheck source=../../scripts/lib/serve.sh
. "$root/scripts/lib/serve.sh"
(cd "$root" && go build -o "$tmp/delayq" ./cmd/delayq)
start_delayq "$tmp/delayq"

ready() { node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$url/readyz"; }
for _ in $(seq 1 100); do ready && break; sleep 0.1; done
ready || { echo "$url/readyz is not 200" >&2; cat "$tmp/stderr" >&2; exit 1; }

DELAYQ_URL="$url" node --test dist/test/

# A clean stop: SIGTERM drains and exits 0.
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
if [ "$status" -ne 0 ]; then
  echo "delayq serve exited $status on SIGTERM:" >&2
  cat "$tmp/stderr" >&2
  exit 1
fi
