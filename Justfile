# fencerun: build, test, integration, chaos, bench, lint.
# `just` itself: npm install -g rust-just

set shell := ["bash", "-euo", "pipefail", "-c"]

version := `git describe --tags --always --dirty 2>/dev/null || echo devel`

# Build ./bin/fencerun, stamped with the version.
build:
    CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version={{version}}" -o bin/fencerun ./cmd/fencerun

# The whole default suite, as CI runs it.
test:
    go test -race ./...

# End-to-end tests of the built binary only.
integration:
    go test -race -count=1 ./integration/...

# Longer chaos runs (random SIGKILL/SIGSTOP of holders and waiters) behind an env var.
chaos minutes="5":
    FENCERUN_CHAOS_MINUTES={{minutes}} go test -race -count=1 -run 'Chaos' -timeout 0 ./integration/...

# Benchmarks: fencerun against flock(1) in one run; writes BENCHMARKS.md.
bench:
    command -v flock >/dev/null || (apt-get update -qq && apt-get install -y -qq util-linux)
    CGO_ENABLED=0 go run ./bench -out BENCHMARKS.md
    go test -run '^$' -bench . -benchmem ./store/...

# gofmt, go vet, staticcheck.
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))" || (gofmt -l $(git ls-files '*.go'); exit 1)
    go vet ./...
    go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
