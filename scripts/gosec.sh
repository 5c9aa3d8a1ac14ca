#!/usr/bin/env bash
# gosec, the Go security analyser, pinned; installed into GOBIN when missing
# or another version (go install only: gosec is no dependency of the
# module). Exits non-zero on any finding not silenced by a
# `// #nosec Gxxx -- reason` comment at its line; see docs/reliability.md
# ("S26 hygiene") for what it checks and the list of exclusions.
#
# ./... from the repository root also walks bench/peers, a separate module
# (benchmark-only), which gosec loads with its own go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."

gosec_version=2.30.0
gobin="$(go env GOBIN)"
gobin="${gobin:-$(go env GOPATH)/bin}"
gosec="$(command -v gosec || echo "$gobin/gosec")"
# go install leaves gosec's own -version at "dev"; the build info has the
# module version.
if ! go version -m "$gosec" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+github.com/securego/gosec/v2[[:space:]]+v$gosec_version[[:space:]]"; then
  echo "installing gosec v$gosec_version …"
  GOBIN="$gobin" go install "github.com/securego/gosec/v2/cmd/gosec@v$gosec_version"
  gosec="$gobin/gosec"
fi

"$gosec" -quiet -fmt text -color=false \
  -nosec-require-rules -nosec-require-justification \
  ./...
