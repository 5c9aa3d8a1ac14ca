#!/usr/bin/env bash
# Reliability tiers (docs/reliability.md).
#   scripts/reliability.sh short   scenario tests (short sizes) + every fuzz target for 30 s   (≤ 15 min)
#   scripts/reliability.sh full    scenario tests at the issue's sizes + every fuzz target for 5 min
#   scripts/reliability.sh fuzz    every fuzz target only, for FUZZTIME (default 30s); .ci/run uses it
#   scripts/reliability.sh soak    S27 only (manual): DELAYQ_SOAK (default 2h) of load with kill -9 every
#                                  5 min; DELAYQ_SOAK_ENGINE=redis also kills Redis every 15 min;
#                                  SOAK_TIMEOUT (default 4h) bounds a hung run
# Env: DELAYQ_RESULTS_DIR (default $TMPDIR/delayq-reliability/<tier>), DELAYQ_SEED, FUZZTIME.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=${1:-short}
case "$tier" in
  short) fuzztime=${FUZZTIME:-30s}; timeout=15m ;;
  full)  fuzztime=${FUZZTIME:-5m};  timeout=90m ;;
  fuzz)  fuzztime=${FUZZTIME:-30s}; timeout= ;;
  soak)  timeout=${SOAK_TIMEOUT:-4h} ;;
  *) echo "usage: $0 short|full|fuzz|soak" >&2; exit 2 ;;
esac
export DELAYQ_RELIABILITY=$tier
export DELAYQ_RESULTS_DIR=${DELAYQ_RESULTS_DIR:-${TMPDIR:-/tmp}/delayq-reliability/$tier}
mkdir -p "$DELAYQ_RESULTS_DIR"
status=0

if [ "$tier" = soak ]; then
  echo "== S27 soak (${DELAYQ_SOAK:-2h}, engine ${DELAYQ_SOAK_ENGINE:-pebble}) → $DELAYQ_RESULTS_DIR"
  go test -count=1 -v -timeout "$timeout" -run '^TestS27Soak$' ./test/reliability/ 2>&1 | tee "$DELAYQ_RESULTS_DIR/soak.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|results: |kill' || true
  grep -q '^ok' "$DELAYQ_RESULTS_DIR/soak.log" || status=1
  exit $status
fi

if [ "$tier" != fuzz ]; then
  echo "== scenarios ($tier) → $DELAYQ_RESULTS_DIR"
  # No -race here: the scenarios drive a separately built server binary and
  # measure timing; the race detector would only slow the test client.
  go test -count=1 -v -timeout "$timeout" ./test/reliability/ 2>&1 | tee "$DELAYQ_RESULTS_DIR/scenarios.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|results: ' || true
  grep -q '^ok' "$DELAYQ_RESULTS_DIR/scenarios.log" || status=1
fi

# One -fuzz per go test invocation. Minimization of an interesting input is
# capped so a slow input (a long-poll body) cannot eat the budget.
# Go 1.26's fuzz coordinator can fail a clean run with a bare "context
# deadline exceeded" as -fuzztime ends (golang/go#75804, fixed in 1.27): a
# failure that wrote no failing input and says only that is reported as
# that flake, not as a failure. Any real failure writes its input.
fuzz() { # package target
  echo "== fuzz $2 ($1) for $fuzztime"
  local log="$DELAYQ_RESULTS_DIR/fuzz-$2.log"
  if ! go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$1" > "$log" 2>&1; then
    if ! grep -q 'Failing input written' "$log" &&
       [ "$(grep -A1 -- "^--- FAIL: $2 " "$log" | tail -1 | tr -d '[:space:]')" = contextdeadlineexceeded ]; then
      echo "flake: go fuzz coordinator deadline race (golang/go#75804), no failing input; counted as pass"
    else
      tail -20 "$log"; status=1
    fi
  else
    tail -2 "$DELAYQ_RESULTS_DIR/fuzz-$2.log" | head -1
  fi
}
fuzz ./internal/httpapi FuzzRequestDecoders
fuzz ./internal/wire FuzzFastValid
fuzz ./internal/wire FuzzSendDecoders
fuzz ./internal/wire FuzzDecodeSendBatchResponse
fuzz ./internal/wire FuzzDuration
fuzz . FuzzValidateName
fuzz . FuzzClientResponse
fuzz ./internal/store/pebblestore FuzzRecordCodec
fuzz ./internal/store/redisstore FuzzKeyBuilder
fuzz ./internal/store/redisstore FuzzDecodeBlob
fuzz ./internal/store/redisstore FuzzRedisURLErrors

exit $status
