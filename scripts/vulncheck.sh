#!/usr/bin/env bash
# govulncheck (scenario S26 in docs/reliability.md) against a local copy of the Go
# vulnerability database. vuln.go.dev is not reachable from every build
# machine, but the module proxy serves golang.org/x/vulndb, whose data/osv
# holds the same OSV reports; its cmd/indexdb turns them into the v1
# database that `govulncheck -db file://…` reads.
#
#   scripts/vulncheck.sh                  # ./... against the newest vulndb
#   VULNDB_VERSION=v0.0.0-… scripts/vulncheck.sh -show verbose ./cmd/...
#
# The database is built once per vulndb version (≈ 5 min the first time on
# 2 cores: indexdb's dependencies are downloaded and compiled) and cached in
# $DELAYQ_VULNDB_DIR (default ~/.cache/delayq-vulndb). Exit status is
# govulncheck's: 3 when reachable vulnerabilities are found.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

vulndb_version=${VULNDB_VERSION:-latest}
govulncheck_version=1.9.0
cache_root=${DELAYQ_VULNDB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/delayq-vulndb}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Outside the repository, so nothing here touches go.mod or go.sum.
cd "$tmp"
info=$(go mod download -json "golang.org/x/vulndb@$vulndb_version")
version=$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",*$/\1/p' <<<"$info")
src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
[ -n "$version" ] && [ -d "$src/data/osv" ] || { echo "vulncheck: no data/osv in golang.org/x/vulndb@$vulndb_version" >&2; exit 1; }
db="$cache_root/$version"
if [ ! -f "$db/index/db.json" ]; then
  echo "vulncheck: building the database from golang.org/x/vulndb@$version …" >&2
  rm -rf "$db.tmp"
  mkdir -p "$cache_root"
  go run "golang.org/x/vulndb/cmd/indexdb@$version" -vulns "$src/data/osv" -out "$db.tmp"
  rm -rf "$db" && mv "$db.tmp" "$db"
fi

gobin="$(go env GOBIN)"
gobin="${gobin:-$(go env GOPATH)/bin}"
govulncheck="$(command -v govulncheck || echo "$gobin/govulncheck")"
if ! "$govulncheck" -version 2>/dev/null | grep -qF "govulncheck@v$govulncheck_version"; then
  echo "vulncheck: installing govulncheck v$govulncheck_version …" >&2
  GOBIN="$gobin" go install "golang.org/x/vuln/cmd/govulncheck@v$govulncheck_version"
  govulncheck="$gobin/govulncheck"
fi

cd "$repo"
echo "vulncheck: golang.org/x/vulndb@$version, $(go version)" >&2
[ $# -gt 0 ] || set -- ./...
exec "$govulncheck" -db "file://$db" "$@"
