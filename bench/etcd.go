package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// P7 runs fencerun --etcd against `etcdctl lock` on one etcd server the
// harness starts for the purpose (package etcdtest's, as the tests start
// theirs: Debian's /usr/bin/etcd, a data directory in the work directory,
// free loopback ports), through the P1 and P2 scenarios and the long hold.
// The peers are Debian's etcdctl and the current one, built from the Go
// module proxy at the version of fencerun's own etcd client.

// etcdctlModule is the module of the current etcdctl.
const etcdctlModule = "go.etcd.io/etcd/etcdctl/v3"

// etcdBench is what P7 runs on: the server, a client of it for the
// harness's own looks (is an etcdctl waiter queued), and the tools.
type etcdBench struct {
	err     error // set: no P7 rows can be measured, and why
	server  *etcdtest.Server
	client  *clientv3.Client
	version string // of the server, for the header

	fencerun *tool // fencerun --etcd URL, through the file binary's exec
	slots    *tool // the same with M1's --slots
	etcdctl  *tool // Debian's
	current  *tool // the current etcdctl, built here
	floor    *tool // bench/etcdfloor, in the hold only
}

// startEtcd starts the server and makes the tools; a reason P7 cannot run
// is kept in e.err and said in each row.
func (h *harness) startEtcd(fencerunBin string, fencerunErr error) *etcdBench {
	e := &etcdBench{}
	fail := func(err error) *etcdBench {
		e.err = fmt.Errorf("P7 skipped: %w", err)
		h.progress("%v", e.err)
		for _, t := range []**tool{&e.fencerun, &e.slots, &e.etcdctl, &e.current, &e.floor} {
			*t = &tool{name: "—", err: e.err}
		}
		return e
	}
	if etcdtest.Binary() == "" {
		return fail(errors.New("no etcd server (/usr/bin/etcd) installed: apt-get install etcd-server etcd-client"))
	}
	if out, err := exec.Command(etcdtest.Binary(), "--version").Output(); err == nil {
		e.version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	dir := filepath.Join(h.work, "etcd")
	h.progress("starting etcd in %s", dir)
	srv, err := etcdtest.StartServer(dir)
	if err != nil {
		return fail(fmt.Errorf("the etcd server did not start: %w", err))
	}
	e.server = srv
	h.notes = append(h.notes, fmt.Sprintf("P7 server: %s, one member at %s, data directory on %s.", orUnknown(e.version), srv.URL(), fsType(h.work)))
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		srv.Stop()
		return fail(fmt.Errorf("no client of the etcd server: %w", err))
	}
	e.client = cl

	helperErr := fencerunErr
	if fencerunErr == nil {
		helperErr = h.buildEtcdHelper(fencerunBin)
	}
	url := srv.URL()
	backend := func(lockSpec) []string { return []string{"--etcd", url} }
	e.fencerun = h.fencerunOn("fencerun --etcd", fencerunBin, helperErr, backend)
	e.fencerun.shared, e.fencerun.settle = true, etcdSettle
	e.slots = h.fencerunOn("fencerun --etcd "+strings.Join(h.slotsFlags(), " "), fencerunBin, helperErr, backend, h.slotsFlags()...)
	e.slots.shared = true
	e.floor = h.etcdFloorTool(url)

	bin, err := exec.LookPath("etcdctl")
	if err != nil {
		err = fmt.Errorf("etcdctl not found (Debian: apt-get install etcd-client): %w", err)
	}
	e.etcdctl = e.etcdctlTool(h, bin, err)
	if h.cfg.Etcdctl == "none" || !h.cfg.wants("P7") && !h.cfg.wants("P8") {
		// M1 alone measures no etcdctl: none is built.
		e.current = nil
		return e
	}
	bin, err = h.cfg.Etcdctl, nil
	if bin == "" {
		bin, err = h.buildEtcdctl()
	}
	e.current = e.etcdctlTool(h, bin, err)
	return e
}

func (e *etcdBench) close() {
	if e.client != nil {
		e.client.Close()
	}
	if e.server != nil {
		e.server.Stop()
	}
}

// buildEtcdHelper puts fencerun-etcd beside fencerun, where fencerun
// looks for it first: built from ./cmd/fencerun-etcd as `just build` builds
// it when the harness built fencerun, else the one that must already be
// there.
func (h *harness) buildEtcdHelper(fencerunBin string) error {
	helper := filepath.Join(filepath.Dir(fencerunBin), "fencerun-etcd")
	if h.cfg.Fencerun != "" {
		if _, err := os.Stat(helper); err != nil {
			return fmt.Errorf("-fencerun %s: no fencerun-etcd beside it: %w", h.cfg.Fencerun, err)
		}
		return nil
	}
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", helper, "./cmd/fencerun-etcd") // as just build makes it
	cmd.Dir = h.cfg.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as buildFencerun's
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("./cmd/fencerun-etcd does not build: %s", firstLine(out))
	}
	return nil
}

// etcdFloorTool is bench/etcdfloor on the server at url: the least a holder on
// the etcd client does (its package comment says what and what it leaves
// out), built as fencerun-etcd is. It only holds: P7's hold row against it
// says how far fencerun's hold is from that floor.
func (h *harness) etcdFloorTool(url string) *tool {
	bin, err := h.buildStatic("./bench/etcdfloor", "etcdfloor", "-tags", "grpcnotrace")
	t := &tool{name: "Go floor, bench/etcdfloor", err: err, shared: true}
	t.argv = func(l lockSpec, cmd ...string) []string {
		ttl := max(l.ttl, 2*time.Second)
		secs := strconv.FormatInt(int64((ttl+time.Second-1)/time.Second), 10)
		return append([]string{bin, url, l.key, secs}, cmd...)
	}
	return t
}

// buildEtcdctl builds the current etcdctl at the version of fencerun's own
// etcd client (go.mod). `go install module@version` refuses it (its go.mod
// replaces its sibling modules with ../ paths, as a monorepo does), so the
// module is downloaded through the proxy and built with those replaces
// dropped: the siblings come from the proxy at the same version.
func (h *harness) buildEtcdctl() (string, error) {
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/client/v3")
	list.Dir = h.cfg.Root
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("the etcd client's version: go list -m: %w", err)
	}
	version := strings.TrimSpace(string(out))
	h.progress("building etcdctl %s from the module proxy", version)
	failed := func(step string, out []byte, err error) (string, error) {
		return "", fmt.Errorf("etcdctl %s does not build here: %s: %v %s", version, step, err, firstLine(out))
	}
	dl := exec.Command("go", "mod", "download", "-json", etcdctlModule+"@"+version)
	dl.Dir = h.work // outside the module: no change to its go.mod
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err = dl.Output()
	if err != nil {
		return failed("go mod download", out, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return failed("go mod download", out, fmt.Errorf("no module directory: %v", err))
	}
	src := filepath.Join(h.work, "etcdctl-src")
	if out, err := exec.Command("cp", "-r", mod.Dir, src).CombinedOutput(); err != nil {
		return failed("copy the module", out, err)
	}
	if out, err := exec.Command("chmod", "-R", "u+w", src).CombinedOutput(); err != nil {
		return failed("chmod", out, err)
	}
	for _, m := range []string{"go.etcd.io/etcd/api/v3", "go.etcd.io/etcd/client/pkg/v3", "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/pkg/v3"} {
		edit := exec.Command("go", "mod", "edit", "-dropreplace="+m)
		edit.Dir = src
		if out, err := edit.CombinedOutput(); err != nil {
			return failed("go mod edit", out, err)
		}
	}
	bin := filepath.Join(h.work, "etcdctl-"+version)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return failed("go build", out, err)
	}
	return bin, nil
}

// etcdctlTool is `etcdctl --endpoints URL lock K -- CMD`, named by its
// version. Its session has etcdctl's default TTL. A waiter is queued once
// its key is under the lock's prefix: one key per contender, so with ahead
// contenders before it there are ahead+1.
func (e *etcdBench) etcdctlTool(h *harness, bin string, err error) *tool {
	name := "etcdctl lock"
	if err == nil {
		out, verr := exec.Command(bin, "version").Output()
		if verr != nil {
			err = fmt.Errorf("%s version: %w", bin, verr)
		} else if v, ok := strings.CutPrefix(firstLine(out), "etcdctl version: "); ok {
			name = "etcdctl " + strings.TrimSuffix(v, " …")
		}
	}
	url := e.server.URL()
	t := &tool{name: name, err: err, shared: true, settle: etcdSettle}
	t.argv = func(l lockSpec, cmd ...string) []string {
		return append([]string{bin, "--endpoints", url, "lock", l.key, "--"}, cmd...)
	}
	t.queued = func(l lockSpec, _, ahead int) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Guard)
		defer cancel()
		resp, err := e.client.Get(ctx, l.key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, err
		}
		return resp.Count > int64(ahead), nil
	}
	return t
}

// etcdSettle is how long a queued etcd waiter is left before the holder
// lets go. etcd delivers a watch that starts at a revision already
// written (concurrency.Mutex's, so etcdctl's, starts at the revision its
// transaction read) only once a loop that runs every 100 ms has synced it:
// an etcdctl waiter woken sooner than that waits for the loop, some 50 ms
// on average, which is etcd's, not the handoff's (fencerun's waiter
// watches from the next revision, synced at once). Both tools get the
// same wait, so the figure is a settled waiter's handoff.
const etcdSettle = 200 * time.Millisecond

// serverPid is the etcd server's pid, for P8's idle queue: etcd waiters'
// cost at rest is partly the server's.
func (e *etcdBench) serverPid() int {
	if e.server == nil {
		return 0
	}
	return e.server.Pid()
}

// etcdPair is P7's: fencerun --etcd against both etcdctls, no slower than
// either.
func (e *etcdBench) pair() pair {
	return pair{id: "P7", subj: e.fencerun, peer: e.etcdctl, peer2: e.current, run: ratioAtMost(1), handoff: ratioAtMost(1)}
}

// etcdHold is P7's hold: CPU (P4's etcd goal) and peak RSS (P7's).
func (h *harness) etcdHold(e *etcdBench) holdSet {
	pr := e.pair()
	pr.floor = e.floor
	return holdSet{
		pr: pr, cpuID: "P7", rssID: "P7",
		cpuFigure: fmt.Sprintf("CPU of the wrapper, %s hold (fencerun --ttl %s; etcdctl its default session TTL, 10 s), start-up included", human(h.cfg.Hold), human(h.cfg.HoldTTL)),
		cpu:       atMost(0.050, seconds), rss: atMost(20<<20, bytes),
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "etcd of unknown version"
	}
	return s
}
