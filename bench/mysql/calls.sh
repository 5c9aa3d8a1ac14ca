#!/bin/sh
# Times <prefix>send_many as an application calls it: CALLS statements
# "START TRANSACTION; CALL <prefix>send_many('calls', '<batch>', @r);
# COMMIT;" sent by one mariadb client over the socket, each batch BATCH
# messages with ids of the caller's (unique per run), 88-character
# base64 payloads (66 bytes), due in a minute. Prints microseconds per
# message, wall clock (the client's own share is small: it sends text).
#
#   MARIADB="mariadb -S /tmp/myb/sock -uroot test" sh bench/mysql/calls.sh delayq_ [CALLS] [BATCH]
#
# Run it with the server's innodb_flush_log_at_trx_commit = 2 to time the
# procedure rather than the disk. Unlike a loop inside the database (a
# CALL from a stored procedure), this also shows the cost of parsing the
# CALL and, should the procedure be reloaded at every call, of that.
set -eu
prefix=$1
calls=${2:-100}
batch=${3:-100}
: "${MARIADB:?set MARIADB to the client command, e.g. mariadb -S /tmp/myb/sock -uroot test}"
sql=$(mktemp)
trap 'rm -f "$sql"' EXIT
run=$(date +%s%N)
payload=eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4
awk -v p="$prefix" -v calls="$calls" -v batch="$batch" -v run="$run" -v pl="$payload" 'BEGIN {
  for (i = 0; i < calls; i++) {
    doc = "["
    for (j = 0; j < batch; j++)
      doc = doc (j ? "," : "") "{\"id\":\"c-" run "-" i "-" j "\",\"payload\":\"" pl "\",\"delay_ms\":60000}"
    printf "START TRANSACTION; CALL %ssend_many(\x27calls\x27, \x27%s]\x27, @r); COMMIT;\n", p, doc
  }
}' > "$sql"
start=$(date +%s%N)
$MARIADB < "$sql"
end=$(date +%s%N)
echo "$prefix $calls calls of $batch: $(( (end - start) / 1000 / (calls * batch) )).$(( (end - start) / 100 / (calls * batch) % 10 )) µs per message"
