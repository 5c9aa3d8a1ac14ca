.DEFAULT_GOAL := help
GO ?= go
# go.mod's toolchain line (go1.26.10 fixes standard-library vulnerabilities
# the server reaches); machines with GOTOOLCHAIN=local would ignore it.
RELEASE_TOOLCHAIN ?= go1.26.10

help: ## list targets
	@grep -hE '^[a-z/-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

serve: ## run the server on ./delayq-data
	$(GO) run ./cmd/delayq serve --data ./delayq-data

test: ## every test with the race detector (the README's command)
	./scripts/test.sh

test/short: ## quick tests: no cluster, no long scenarios
	$(GO) test -short -count=1 ./...

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

vulncheck: ## govulncheck on a local copy of the vulnerability database
	GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) ./scripts/vulncheck.sh

gosec: ## gosec security analyser (pinned; fails on any finding not #nosec'd)
	./scripts/gosec.sh

VERSION ?= v0
fixtures: ## write testdata/stores/$(VERSION), the upgrade fixture of a release (VERSION=vX.Y.Z; v0 only before the first)
	$(GO) test -count=1 -run TestUpgrade ./test/upgrade -update -fixture-version $(VERSION)

bench/wheel: ## our wheel vs time.AfterFunc vs container/heap, side by side
	$(GO) run ./internal/bench/wheelbench/cmd/wheelbench -sizes 100000,1000000 -long 1000000

build: ## build bin/delayq with the release toolchain (stamped with the VCS revision: delayq version)
	GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) $(GO) build -buildvcs=true -o bin/delayq ./cmd/delayq

PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST ?= dist
release: ## static binaries for $(PLATFORMS) in $(DIST)/, with $(DIST)/SHA256SUMS
	rm -rf $(DIST) && mkdir -p $(DIST)
	set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) \
	    $(GO) build -buildvcs=true -trimpath -ldflags='-s -w' -o $(DIST)/delayq-$$os-$$arch ./cmd/delayq; \
	done
	cd $(DIST) && sha256sum delayq-* > SHA256SUMS && cat SHA256SUMS

.PHONY: help serve test test/short lint vulncheck gosec fixtures bench/wheel build release
