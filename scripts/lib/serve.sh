# Sourced by scripts that test against a live `delayq serve` (the README
# check, the TypeScript client's test). Defines:
#   tmp          a scratch directory, removed on exit
#   start_delayq BIN
#                starts BIN serve on a free loopback port with its data in
#                $tmp/data, and sets pid and url (from the start-up record)
# An EXIT trap stops the server (SIGTERM) and removes $tmp.

tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_delayq() {
  # Port 0: the kernel picks a free port; the server logs the address in
  # its start-up record (msg="delayq serving" url=…, an info record on
  # stderr).
  "$1" serve --addr 127.0.0.1:0 --data "$tmp/data" --no-dashboard --log-level info >"$tmp/stdout" 2>"$tmp/stderr" &
  pid=$!
  url=""
  for _ in $(seq 1 300); do
    url="$(grep 'msg="delayq serving"' "$tmp/stderr" | grep -oE 'url=https?://[^ ]+' | head -1 | cut -d= -f2- || true)"
    [ -n "$url" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "delayq serve exited:" >&2
      cat "$tmp/stdout" "$tmp/stderr" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "delayq serve did not start in 30 s" >&2
  cat "$tmp/stderr" >&2
  exit 1
}
