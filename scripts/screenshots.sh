#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/img/dashboard-*.png
# (README.md and docs/dashboard.md show them). The dashboard's browser
# test (internal/dashboard TestBrowser) serves the API and dashboard on a
# loopback port, fills it with demo data through the API (topics with
# scheduled, ready, dead and acked messages, a paused topic, a push topic
# and a Kafka delivery topic), drives headless Chromium through the pages
# and, with DELAYQ_SCREENSHOTS=1, saves each page it checks.
#
# Needs Chromium at /usr/bin/chromium or on PATH (apt-get install -y
# chromium; scripts/test.sh installs it). Not run in CI: the images are
# committed, and only change when the pages do.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ] && ! command -v chromium >/dev/null 2>&1; then
  echo "screenshots: no chromium (apt-get install -y chromium)" >&2
  exit 1
fi
DELAYQ_SCREENSHOTS=1 go test -count=1 -run '^TestBrowser$' -v ./internal/dashboard | grep -E 'wrote|^(---|ok|FAIL)'
ls -l docs/img/dashboard-*.png
