# fencerun: build, test, integration, chaos, bench, lint, man, release.
# `just` itself: npm install -g rust-just

set shell := ["bash", "-euo", "pipefail", "-c"]

version := `git describe --tags --always --dirty 2>/dev/null || echo devel`

# Build ./bin/fencerun and ./bin/fencerun-etcd (the etcd backend, which
# fencerun execs for --etcd), stamped with the version. grpcnotrace leaves
# gRPC's x/net/trace (html/template, its debug pages) out of fencerun-etcd:
# 0.4 MB less resident (P7's peak RSS).
build:
    CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/fencerun/fencerun/cmd/internal/cli.version={{version}}" -o bin/fencerun ./cmd/fencerun
    CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-X github.com/fencerun/fencerun/cmd/internal/cli.version={{version}}" -o bin/fencerun-etcd ./cmd/fencerun-etcd

# Static binaries for linux/amd64 and linux/arm64: dist/fencerun-VERSION-linux-ARCH/
# holds fencerun, fencerun-etcd (found beside it) and the manual page, and a .tar.gz
# of each; dist/SHA256SUMS covers the archives and every file in them.
release: man
    rm -rf dist && mkdir -p dist
    for arch in amd64 arm64; do \
        d=dist/fencerun-{{version}}-linux-$arch; mkdir -p $d; \
        for cmd in fencerun fencerun-etcd; do \
            CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -tags grpcnotrace -ldflags "-s -w -X github.com/fencerun/fencerun/cmd/internal/cli.version={{version}}" -o $d/$cmd ./cmd/$cmd; \
        done; \
        cp docs/fencerun.1 README.md LICENSE CHANGELOG.md $d/; \
        tar -C dist -czf $d.tar.gz $(basename $d); \
    done
    cd dist && sha256sum *.tar.gz */* > SHA256SUMS && cat SHA256SUMS

# The manual page, docs/fencerun.1, from the command model (a test fails when it is stale).
man:
    go run ./cmd/fencerun man > docs/fencerun.1

# The whole default suite, as CI runs it.
test:
    go test -race ./...

# End-to-end tests of the built binary only.
integration:
    go test -race -count=1 ./integration/...

# Longer chaos runs (random SIGKILL/SIGSTOP of holders and waiters; on etcd,
# of members of a 3-member cluster too) behind an env var.
chaos minutes="5":
    FENCERUN_CHAOS_MINUTES={{minutes}} go test -race -count=1 -run 'Chaos' -timeout 0 ./integration/...

# A thousand waiter processes on one key drain in arrival order, none lost
# (the default suite queues 300).
waiters count="1000":
    FENCERUN_WAITERS={{count}} go test -count=1 -run 'TestManyWaitersInArrivalOrder' -timeout 0 ./integration/

# --once-per across many periods (3 in the default suite): three runs per
# 2 s period on the file backend and on etcd, one success each.
once-soak periods="30":
    FENCERUN_ONCE_PERIODS={{periods}} go test -race -count=1 -run 'TestOncePerPeriodConcurrent' -v -timeout 0 ./integration/...

# etcd across hosts (root): a 3-member cluster, one member per network
# namespace; runs of each fault (link down, packets dropped, leader killed
# or moved) for fencerun and etcdctl lock --ttl 6, and the leader kill at
# TTLs 2-5; logs runs / failovers kept / overlaps / median takeover.
chaos-etcd runs="20":
    FENCERUN_CHAOS_ETCD={{runs}} go test -count=1 -v -run 'TestEtcdFailoverAcrossHosts|TestEtcdElectionsAreNotFailures' -timeout 0 ./integration/ | grep -v '^20[0-9][0-9]-'

# Benchmarks: fencerun against flock(1), and fencerun --etcd against etcdctl lock on an etcd
# server of its own (docs/CONTRACT.md P1-P8; M1 --slots and M2 --shared), the store's Go
# benchmarks included; rewrites BENCHMARKS.md. Flags pass through: just bench -bench-count 6;
# just bench -only p7 (prints only); just bench -only m1,m2 -bench-count 0
bench *FLAGS:
    command -v flock >/dev/null || (apt-get update -qq && apt-get install -y -qq util-linux)
    command -v gcc >/dev/null || (apt-get update -qq && apt-get install -y -qq gcc libc6-dev)
    CGO_ENABLED=0 go run ./bench {{FLAGS}}

# gofmt, go vet, go mod tidy -diff, staticcheck (as .ci/run does first).
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))" || (gofmt -l $(git ls-files '*.go'); exit 1)
    go vet ./...
    go mod tidy -diff
    go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
