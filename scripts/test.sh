#!/usr/bin/env bash
# The one test command (README, .ci/run). Installs what the tests need when
# it can (redis-server, cc, PostgreSQL, MariaDB, RabbitMQ and NATS, for the
# Redis, PostgreSQL and MySQL engines and the broker targets; Node for the
# TypeScript client; Chromium for the dashboard's browser test; curl and jq
# for the README check), then runs go vet, staticcheck, gosec, every Go
# test with the race detector, the TypeScript client's tests and the
# README's examples against a live server.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
# initdb and postgres: in PATH, or where Debian puts them (not in PATH)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_pkgs+=(postgresql)
fi
# the Redis suites that set Redis's clock build a small preload library
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc libc6-dev)
# mariadbd and mariadb-install-db (in /usr/sbin and /usr/bin on Debian)
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  need_pkgs+=(mariadb-server)
fi
# Broker delivery targets are tested against real RabbitMQ and NATS servers.
[ -x /usr/sbin/rabbitmq-server ] || need_pkgs+=(rabbitmq-server)
[ -x /usr/sbin/nats-server ] || need_pkgs+=(nats-server)
# the dashboard's browser test drives Debian's headless Chromium (≈ 350 MB
# installed: announced below before it is fetched)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)
# scripts/readme-check.sh runs the README's curl examples (jq reads answers)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v jq >/dev/null 2>&1 || need_pkgs+=(jq)
# the TypeScript client's test (clients/typescript/test.sh)
command -v node >/dev/null 2>&1 || need_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need_pkgs[*]} …"
    case " ${need_pkgs[*]} " in
      *" chromium "*) echo "note: chromium (for the dashboard's browser test) is about 350 MB installed, with its libraries" ;;
    esac
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "missing ${need_pkgs[*]}: install them (e.g. sudo apt-get install ${need_pkgs[*]}); the Redis, PostgreSQL and MySQL tests need them" >&2
    exit 1
  fi
fi

go vet ./...

# staticcheck, pinned; installed into GOBIN when missing or another version
# (≈ 1 min to install, ≈ 2 min to run on 2 cores).
staticcheck_version=0.8.2
gobin="$(go env GOBIN)"
gobin="${gobin:-$(go env GOPATH)/bin}"
staticcheck="$(command -v staticcheck || echo "$gobin/staticcheck")"
if ! "$staticcheck" -version 2>/dev/null | grep -qF "($staticcheck_version)"; then
  echo "installing staticcheck v$staticcheck_version …"
  GOBIN="$gobin" go install "honnef.co/go/tools/cmd/staticcheck@v$staticcheck_version"
  staticcheck="$gobin/staticcheck"
fi
"$staticcheck" ./...

# gosec, pinned (installs like staticcheck: ~100 s once); fails on any
# finding without a justified #nosec.
bash scripts/gosec.sh

# -p 1 on 2 cores would be slow; the default parallelism is fine but the
# race detector multiplies memory, so keep the timeout generous.
go test -race -count=1 -timeout 20m ./... "$@"

# Examples are modules of their own (./... skips them; a replace points them
# at this tree): vet, test and run them so they keep working as users see them.
(cd examples/inprocess && go vet ./... && go test -race -count=1 ./... && go run .)

# The deployment files in deploy/ (linters, promtool, systemd-analyze, the
# binary in a read-only sandbox; docs/operations.md).
bash deploy/check.sh

# The TypeScript client, typed from the API's OpenAPI document, against a live
# `delayq serve`: the API document proven from another language.
bash clients/typescript/test.sh

# The README's examples marked <!-- readme-check --> (the curl quickstart,
# schedules, rate limits), run in order against a live `delayq serve`.
bash scripts/readme-check.sh

# The MySQL model test skips itself under -race (9 min there, 3 without).
go test -count=1 -timeout 10m -run '^TestModelDBClock$' ./internal/store/mysqlstore/
