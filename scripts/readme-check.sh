#!/usr/bin/env bash
# Runs README.md's shell blocks marked <!-- readme-check --> (the line
# before the ```sh fence), in order and in one shell, against a fresh
# `delayq serve` built from this tree on a free loopback port with a
# throwaway data directory: the README's examples must run as they are
# printed. localhost:7070 in the blocks is replaced by the server's address,
# `delayq` is the binary just built, and every curl fails on an HTTP error
# (--fail-with-body), so a 404 from a stale example fails the check.
# Needs Go, curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."

for c in curl jq; do
  command -v "$c" >/dev/null 2>&1 || { echo "scripts/readme-check.sh: $c is needed (apt-get install $c)" >&2; exit 1; }
done

# shellcheck source=lib/serve.sh
. scripts/lib/serve.sh

mkdir -p "$tmp/bin"
go build -o "$tmp/bin/delayq" ./cmd/delayq

# The marked blocks, each preceded by a line naming where it starts.
awk '
  /^<!-- readme-check -->$/ { want = 1; next }
  want && /^```sh/          { inblock = 1; want = 0; printf "echo \"+ README.md block at line %d\" >&2\n", NR + 1; next }
  inblock && /^```/         { inblock = 0; next }
  inblock                   { print }
' README.md >"$tmp/blocks.sh"
blocks="$(grep -c '^echo "+ README.md block' "$tmp/blocks.sh" || true)"
[ "$blocks" -ge 1 ] || { echo "scripts/readme-check.sh: no block of README.md is marked <!-- readme-check -->" >&2; exit 1; }

start_delayq "$tmp/bin/delayq"
hostport="${url#*://}"

sed -e "s#localhost:7070#$hostport#g" -e "s#127\.0\.0\.1:7070#$hostport#g" "$tmp/blocks.sh" >"$tmp/run.sh"
{
  echo 'set -euo pipefail'
  echo 'shopt -s inherit_errexit'
  echo 'curl() { command curl --fail-with-body --max-time 60 "$@" || return; echo; }'
  cat "$tmp/run.sh"
} >"$tmp/script.sh"

if ! PATH="$tmp/bin:$PATH" DELAYQ_SERVER="$url" bash "$tmp/script.sh"; then
  echo "scripts/readme-check.sh: a README.md block failed (the last '+ README.md block at line N' above names it)" >&2
  exit 1
fi
echo "scripts/readme-check.sh: $blocks README.md blocks ran against $url"
