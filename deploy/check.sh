#!/usr/bin/env bash
# Checks the deployment files in deploy/ on a machine without Docker or a
# running systemd (scripts/test.sh runs it; so can you: bash deploy/check.sh):
#
#  a. the Dockerfile and compose.yaml: linted (dockerfile-utils, dclint), and
#     held to what docs/operations.md promises (non-root, health check,
#     SIGTERM, stop timeouts that cover the drain, Redis AOF settings, env
#     names that are real flags);
#  b. the Prometheus rules: promtool check rules and test rules;
#  c. the systemd unit: systemd-analyze verify and security, when present;
#  d. the Grafana dashboard: valid JSON, every query valid PromQL (promtool),
#     every metric it names exported by delayq;
#  r. the release: `make release` for linux/amd64, SHA256SUMS verified, the
#     binary static and naming its revision (the checks below run it);
#  e. the delayq binary as the image runs it: a non-root user, a read-only
#     root file system with only the data directory writable (bubblewrap):
#     serve until /readyz is 200, send a message, run the image's health
#     check command, then SIGTERM and expect exit 0 in time.
#
# Installs what it lacks like scripts/test.sh: Debian packages with apt-get
# when root (else it names them and stops), promtool with `go install`
# (pinned; ≈ 8 min of CPU once, about 4 min on two idle cores), and the
# two npm linters (pinned) into a cache directory.
set -euo pipefail
cd "$(dirname "$0")/.."

promtool_module=github.com/prometheus/prometheus
promtool_version=v0.316.0 # Prometheus 3.16's promtool (module versions are v0.3xx)
dockerfile_utils_version=0.16.3
dclint_version=3.1.0

say() { printf 'deploy check: %s\n' "$*"; }
fail() {
  printf 'deploy check: FAIL: %s\n' "$*" >&2
  exit 1
}

# --- what the checks need --------------------------------------------------
need_pkgs=()
command -v bwrap >/dev/null 2>&1 || need_pkgs+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v jq >/dev/null 2>&1 || need_pkgs+=(jq)
command -v file >/dev/null 2>&1 || need_pkgs+=(file)
command -v npm >/dev/null 2>&1 || need_pkgs+=(nodejs npm)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${need_pkgs[*]} …"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    fail "missing ${need_pkgs[*]}: install them (e.g. sudo apt-get install ${need_pkgs[*]})"
  fi
fi

gobin="$(go env GOBIN)"
gobin="${gobin:-$(go env GOPATH)/bin}"
promtool="$(command -v promtool || echo "$gobin/promtool")"
if ! go version -m "$promtool" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+${promtool_module}[[:space:]]+${promtool_version}([[:space:]]|$)"; then
  say "installing promtool $promtool_version …"
  # remove_all_sd leaves out the service discoveries (cloud SDKs,
  # Kubernetes), which rule checks and tests never use: half of the build.
  GOBIN="$gobin" GOFLAGS=-tags=remove_all_sd go install "$promtool_module/cmd/promtool@$promtool_version"
  promtool="$gobin/promtool"
fi

npm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/delayq/deploy-check-npm"
npm_has() { [ "$(jq -r .version "$npm_dir/node_modules/$1/package.json" 2>/dev/null)" = "$2" ]; }
if ! npm_has dockerfile-utils "$dockerfile_utils_version" || ! npm_has dclint "$dclint_version"; then
  say "installing dockerfile-utils $dockerfile_utils_version and dclint $dclint_version into $npm_dir …"
  mkdir -p "$npm_dir"
  # A registry hiccup must not fail CI silently: errors are shown, and
  # the install is tried three times.
  for attempt in 1 2 3; do
    if npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
      "dockerfile-utils@$dockerfile_utils_version" "dclint@$dclint_version" >/dev/null; then
      break
    fi
    if [ "$attempt" = 3 ]; then
      say "npm install failed three times"
      exit 1
    fi
    say "npm install failed; retrying in 5 s"
    sleep 5
  done
fi
npx_bin="$npm_dir/node_modules/.bin"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
chmod 0755 "$work" # the sandboxed server (another user) runs the binary from here

# The release binary, built by `make release` as a release is (the
# Dockerfile builds the same way): its checksum must verify, it must be
# static, and it must name its version and revision. The checks below run
# this binary. One platform: the others are the same build, cross-compiled.
release_start=$(date +%s)
make --no-print-directory release PLATFORMS=linux/amd64 DIST="$work/dist" >"$work/release.log" 2>&1 ||
  fail "make release: $(tail -20 "$work/release.log")"
(cd "$work/dist" && sha256sum -c --strict SHA256SUMS >/dev/null) || fail "make release: SHA256SUMS does not verify"
dq="$work/dist/delayq-linux-amd64"
file_out="$(file -b "$dq")"
[[ "$file_out" == *"statically linked"* ]] || fail "$dq is not static: $file_out"
version_out="$("$dq" version)" || fail "$dq version failed"
release_go="$(sed -nE 's/^RELEASE_TOOLCHAIN \?= (go[0-9.]+)$/\1/p' Makefile)"
# "delayq VERSION (REVISION[+dirty], TIME, GO)": stamped from git, built by
# the release toolchain. Go stamps only in a clone whose .git is a
# directory (not a git worktree, not a tarball).
if [ -d .git ]; then
  [[ "$version_out" =~ ^delayq\ [^\ ]+\ \([0-9a-f]{12}(\+dirty)?,\ .*,\ ${release_go}\)$ ]] ||
    fail "$dq version prints '$version_out'; want the version, the git revision and $release_go"
else
  [[ "$version_out" =~ ^delayq\ [^\ ]+\ \(.*${release_go}\)$ ]] ||
    fail "$dq version prints '$version_out'; want the version and $release_go"
  say "release: not a git clone (.git is no directory): the revision stamp is not checked"
fi
say "release: make release (linux/amd64) in $(($(date +%s) - release_start))s, SHA256SUMS verify, static, $version_out"

# Flags of `delayq serve`, and so the DELAYQ_* names it reads.
serve_help="$("$dq" serve -h)"
# (help prints --name; one dash is accepted too)
env_names="$(grep -oE '^  --?[a-z0-9-]+' <<<"$serve_help" | sed -E 's/^  --?//' | tr 'a-z-' 'A-Z_' | sed 's/^/DELAYQ_/')"
# --token reads DELAYQ_SERVE_TOKENS; DELAYQ_SERVER, DELAYQ_TOKEN, DELAYQ_TIMEOUT
# and DELAYQ_JSON are the CLI's (the health check runs the CLI).
env_names+=$'\nDELAYQ_SERVE_TOKENS\nDELAYQ_SERVER\nDELAYQ_TOKEN\nDELAYQ_TIMEOUT\nDELAYQ_JSON'
check_env_names() { # file, names...
  local file="$1" n
  shift
  for n in "$@"; do
    grep -qxF "$n" <<<"$env_names" || fail "$file sets $n, which no delayq flag reads (see delayq serve -h)"
  done
}
drain_default_s="$(grep -A1 -E '^  --?drain-timeout ' <<<"$serve_help" | grep -oE 'default [0-9]+s' | grep -oE '[0-9]+' || true)"
[ -n "$drain_default_s" ] || fail "cannot read --drain-timeout's default from delayq serve -h"
# Shutdown: the server drains, then push delivery stops, then the engine
# closes, each bounded by --drain-timeout.
min_stop_s=$((3 * drain_default_s))

# --- a. Dockerfile and compose -----------------------------------------------
df=deploy/docker/Dockerfile
lint_out="$("$npx_bin/dockerfile-utils" lint "$df")" || fail "dockerfile-utils lint $df: $lint_out"
grep -qE '^ENV CGO_ENABLED=0' "$df" || fail "$df: the build must set CGO_ENABLED=0 (a static binary for distroless)"
grep -qE 'go build .*-trimpath' "$df" || fail "$df: the build must use -trimpath, like make release"
grep -qE 'go build .*-buildvcs=' "$df" || fail "$df: the build must stamp the VCS revision, like make release"
user="$(grep -E '^USER ' "$df" | tail -1 | awk '{print $2}')"
case "${user%%:*}" in
  "" | 0 | root) fail "$df: the final stage must run as a non-root USER (has: '${user}')" ;;
esac
grep -qE '^VOLUME \["/var/lib/delayq"\]' "$df" || fail "$df: VOLUME /var/lib/delayq"
grep -qE '^EXPOSE 7070' "$df" || fail "$df: EXPOSE 7070"
grep -qE '^STOPSIGNAL SIGTERM' "$df" || fail "$df: STOPSIGNAL SIGTERM (delayq drains on SIGTERM)"
# shellcheck disable=SC2046
check_env_names "$df" $(sed -n '/^ENV /,/[^\\]$/p' "$df" | grep -oE 'DELAYQ_[A-Z_]+')
image_health="$(sed -n '/^HEALTHCHECK/,/CMD/p' "$df" | grep -oE 'CMD \[.*\]' | sed 's/^CMD //')"
[ -n "$image_health" ] || fail "$df: no HEALTHCHECK … CMD [\"…\"]"
jq -e 'type == "array" and .[0] == "/usr/local/bin/delayq"' <<<"$image_health" >/dev/null ||
  fail "$df: the HEALTHCHECK must run /usr/local/bin/delayq (no shell or curl in the image): $image_health"

compose=deploy/docker/compose.yaml
lint_out="$("$npx_bin/dclint" --max-warnings 0 "$compose")" || fail "dclint $compose: $lint_out"
compose_json="$("$npx_bin/js-yaml" "$compose")"
cq() { jq -r "$@" <<<"$compose_json"; }
[ "$(cq -c '.services.delayq.healthcheck.test | if .[0] == "CMD" then .[1:] else . end')" = "$(jq -c . <<<"$image_health")" ] ||
  fail "$compose: the delayq health check differs from the image's HEALTHCHECK"
[ "$(cq '.services.delayq.stop_signal')" = SIGTERM ] || fail "$compose: stop_signal SIGTERM"
grace="$(cq '.services.delayq.stop_grace_period')"
if ! [[ "$grace" =~ ^([0-9]+)s$ ]] || [ "${BASH_REMATCH[1]}" -lt "$min_stop_s" ]; then
  fail "$compose: stop_grace_period $grace is shorter than 3 × --drain-timeout (${min_stop_s}s)"
fi
[ "$(cq '.services.delayq.read_only')" = true ] || fail "$compose: the delayq container's root should be read-only"
redis_cmd="$(cq '.services.redis.command | join(" ")')"
for want in "--appendonly yes" "--appendfsync always" "--maxmemory-policy noeviction"; do
  [[ " $redis_cmd " == *" $want "* ]] || fail "$compose: redis-server needs $want (internal/store/redisstore, Durability)"
done
# shellcheck disable=SC2046
check_env_names "$compose" $(cq '.services.delayq.environment | keys[]')
say "a. Dockerfile and compose.yaml: linted, invariants hold"

# --- b. Prometheus rules ---------------------------------------------------
out="$("$promtool" check rules deploy/prometheus/alerts.yaml 2>&1)" || fail "promtool check rules: $out"
out="$(cd deploy/prometheus && "$promtool" test rules alerts_test.yaml 2>&1)" || fail "promtool test rules: $out"
say "b. alerts.yaml: promtool check rules and test rules pass"

# --- c. systemd unit -------------------------------------------------------
unit=deploy/systemd/delayq.service
stop_s="$(grep -E '^TimeoutStopSec=' "$unit" | grep -oE '[0-9]+')"
[ "${stop_s:-0}" -ge "$min_stop_s" ] || fail "$unit: TimeoutStopSec is shorter than 3 × --drain-timeout (${min_stop_s}s)"
# shellcheck disable=SC2046
check_env_names "$unit" $(grep -E '^Environment=' "$unit" | grep -oE 'DELAYQ_[A-Z_]+')
# shellcheck disable=SC2046
check_env_names deploy/systemd/delayq.env.example $(grep -oE '^#?DELAYQ_[A-Z_]+' deploy/systemd/delayq.env.example | tr -d '#')
if command -v systemd-analyze >/dev/null 2>&1; then
  # verify checks that ExecStart's binary exists: point it at the one built above.
  mkdir "$work/unit"
  sed "s#^ExecStart=/usr/local/bin/delayq #ExecStart=$dq #" "$unit" >"$work/unit/delayq.service"
  systemd-analyze verify "$work/unit/delayq.service"
  exposure="$(systemd-analyze security --offline=yes "$work/unit/delayq.service" 2>/dev/null | grep -oE 'exposure level for delayq.service: [0-9.]+' | grep -oE '[0-9.]+$' || true)"
  if [ -n "$exposure" ]; then
    awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "$unit: systemd-analyze security exposure $exposure (was 1.2; keep it ≤ 2.0)"
    say "c. delayq.service: systemd-analyze verify passes, security exposure $exposure"
  else
    say "c. delayq.service: systemd-analyze verify passes (this systemd has no offline security check)"
  fi
else
  say "c. skipped: no systemd-analyze on this machine"
fi

# --- e. the binary, sandboxed like the container -----------------------------
# Before d: its /metrics scrape cross-checks the metric names d reads from
# the source.
data="$work/data"
mkdir -m 0700 "$data"
admin_secret="admin-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# tokens.example with its placeholders filled: the file the compose user makes.
sed -e "s/<random-secret-1>/$admin_secret/" \
  -e "s/<random-secret-[0-9]*>/other-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')/" \
  deploy/docker/tokens.example >"$work/tokens"
chmod 0644 "$work/tokens"
sandbox=(bwrap --ro-bind / / --dev /dev --bind "$data" "$data" --unshare-ipc --unshare-uts
  --new-session --die-with-parent --info-fd 3)
if [ "$(id -u)" = 0 ]; then
  chown 65532:65532 "$data" # the image's user
  sandbox+=(setpriv --reuid=65532 --regid=65532 --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all)
fi
# As the image: env, not flags; a loopback port the kernel picks (the
# server logs it in its "delayq serving" record), since this machine's
# tests never take fixed ports.
DELAYQ_ADDR=127.0.0.1:0 DELAYQ_DATA="$data" DELAYQ_LOG_FORMAT=json DELAYQ_TOKENS_FILE="$work/tokens" \
  DELAYQ_DRAIN_TIMEOUT=5s \
  "${sandbox[@]}" "$dq" serve >"$work/out" 2>"$work/err" 3>"$work/info" &
bwrap_pid=$!
for _ in $(seq 1 100); do
  grep -q '"msg":"delayq serving"' "$work/err" 2>/dev/null && break
  kill -0 "$bwrap_pid" 2>/dev/null || break
  sleep 0.1
done
base="$(grep '"msg":"delayq serving"' "$work/err" | grep -oE 'http://127\.0\.0\.1:[0-9]+' || true)"
server_pid="$(jq -r '."child-pid"' "$work/info" 2>/dev/null || true)"
if [ -z "$base" ] || [ -z "$server_pid" ]; then
  fail "the sandboxed server did not start: $(cat "$work/out" "$work/err")"
fi
cp "/proc/$server_pid/status" "$work/uid"
[ "$(awk '/^Uid:/ {print $2}' "$work/uid")" != 0 ] || fail "the sandboxed server runs as root"
ready=""
for _ in $(seq 1 100); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ]; then
    ready=1
    break
  fi
  sleep 0.1
done
[ -n "$ready" ] || fail "/readyz never answered 200: $(cat "$work/err")"
code="$(curl -s -o "$work/send" -w '%{http_code}' -H "authorization: Bearer $admin_secret" \
  -H 'content-type: application/json' -XPOST "$base/v1/topics/deploy.check/messages" \
  -d '{"id":"check-1","payload":"hello","delay":"1h"}')"
[ "${code:0:1}" = 2 ] || fail "send answered $code: $(cat "$work/send")"
compgen -G "$data/MANIFEST-*" >/dev/null || fail "the engine wrote nothing in the data directory"
curl -sf -H "authorization: Bearer $admin_secret" "$base/v1/topics/deploy.check/messages/check-1" |
  jq -e '.id == "check-1"' >/dev/null || fail "the message sent does not read back"
# What the server sees: every mount read-only but its data directory (and
# the fresh /dev bubblewrap makes).
writable="$(awk '$6 !~ /(^|,)ro(,|$)/ {print $5}' "/proc/$server_pid/mountinfo" | grep -vE '^/dev(/|$)' || true)"
[ "$writable" = "$data" ] || fail "the sandbox should leave only $data writable, not: $(tr '\n' ' ' <<<"$writable")"
# The image's health check command: no token needed.
mapfile -t health_args < <(jq -r '.[1:][]' <<<"$image_health")
DELAYQ_SERVER="$base" "$dq" "${health_args[@]}" >/dev/null ||
  fail "the image's health check failed against a ready server"
curl -sf -H "authorization: Bearer $admin_secret" "$base/metrics" >"$work/metrics" || fail "/metrics with the admin token"
# SIGTERM to delayq itself (bwrap forwards nothing), then bwrap exits with its status.
start=$(date +%s)
kill -TERM "$server_pid"
wait_s=$((3 * 5 + 5))
for _ in $(seq 1 $((wait_s * 10))); do
  kill -0 "$bwrap_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$bwrap_pid" 2>/dev/null && fail "delayq did not exit within ${wait_s}s of SIGTERM"
rc=0
wait "$bwrap_pid" || rc=$?
server_pid=""
[ "$rc" = 0 ] || fail "delayq exited $rc after SIGTERM: $(tail -5 "$work/err")"
if DELAYQ_SERVER="$base" "$dq" "${health_args[@]}" >/dev/null 2>&1; then
  fail "the image's health check passed with the server stopped"
fi
say "e. sandboxed serve (uid $(awk '/^Uid:/ {print $2}' "$work/uid"), read-only root): ready, send, health check, SIGTERM → exit 0 in $(($(date +%s) - start))s"

# --- d. Grafana dashboard and metric names -----------------------------------
dash=deploy/grafana/delayq.json
jq -e '.title and .uid and (.panels | length > 0)' "$dash" >/dev/null || fail "$dash: not a dashboard (title, uid, panels)"
jq -e '[.panels[].id] | length == (unique | length)' "$dash" >/dev/null || fail "$dash: panel ids repeat"
jq -e 'all(.panels[]; .gridPos.x + .gridPos.w <= 24)' "$dash" >/dev/null || fail "$dash: a panel is wider than the grid"
# Every query as PromQL: Grafana's variables replaced, then parsed by
# promtool as recording rules.
# shellcheck disable=SC2016 # the $ are Grafana's, for sed to replace
jq -r '[.. | objects | .expr? // empty] | .[]' "$dash" |
  sed -e 's/\$__rate_interval/5m/g' -e 's/\$job/delayq/g' -e 's/\$instance/.*/g' -e 's/\$topic/.*/g' |
  jq -R -s '{groups: [{name: "dashboard", rules: [split("\n") | map(select(length > 0)) | to_entries[] | {record: "dashboard:query_\(.key)", expr: .value}]}]}' \
    >"$work/dashboard-rules.json"
out="$("$promtool" check rules "$work/dashboard-rules.json" 2>&1)" || fail "$dash: a query is not valid PromQL: $out"
# delayq's metric names, from the package that registers them all.
known="$(
  {
    grep -hoE 'counter\("[a-z_]+"' internal/metrics/*.go | grep -oE '"[a-z_]+"' | tr -d '"' | sed 's/^/delayq_/'
    grep -hoE 'Namespace: "delayq", Name: "[a-z_]+"' internal/metrics/*.go | grep -oE '"[a-z_]+"$' | tr -d '"' | sed 's/^/delayq_/'
    grep -hoE 'NewDesc\("delayq_[a-z_]+"' internal/metrics/*.go | grep -oE 'delayq_[a-z_]+'
  } | sort -u
)"
# The live scrape must not show a delayq metric the source grep missed
# (else this check reads the source wrongly).
while read -r m; do
  grep -qxF "$m" <<<"$known" || fail "/metrics has $m, which the grep of internal/metrics missed: fix deploy/check.sh"
done < <(grep -oE '^# TYPE delayq_[a-z_]+' "$work/metrics" | awk '{print $3}')
# Runtime and process metrics come from the live scrape.
known+=$'\n'"$(grep -oE '^# TYPE (go|process)_[a-z_]+' "$work/metrics" | awk '{print $3}')"
check_names() { # file, text
  local m base
  while read -r m; do
    base="$(sed -E 's/_(bucket|count|sum)$//' <<<"$m")"
    grep -qxF "$m" <<<"$known" || grep -qxF "$base" <<<"$known" ||
      fail "$1 uses $m, which delayq does not export (internal/metrics)"
  done < <(grep -oE '\b(delayq|go|process)_[a-z0-9_]+\b' <<<"$2" | sort -u)
}
check_names "$dash" "$(jq -r '.. | objects | (.expr?, .query.query?) // empty' "$dash")"
check_names deploy/prometheus/alerts.yaml "$(grep -vE '^[[:space:]]*#' deploy/prometheus/alerts.yaml)"
check_names deploy/prometheus/alerts_test.yaml "$(grep -vE '^[[:space:]]*#' deploy/prometheus/alerts_test.yaml)"
say "d. delayq.json: valid JSON and PromQL; dashboard and alerts use only exported metrics ($(grep -c . <<<"$known") known)"
say "all passed"
