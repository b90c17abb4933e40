package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// lockSpec names one lock: the state directory the scenario made for it
// (fresh per scenario, so runs never see each other's state), the key, and
// the lease duration where the tool has one.
type lockSpec struct {
	dir   string // the tool's state root
	files string // the harness's fifos and stamps for this lock
	key   string
	ttl   time.Duration // 0: the tool's default
}

// A tool is one way to run a command while holding a lock: fencerun on a
// backend, or a peer it is measured against: flock(1) for the file
// backend, `etcdctl lock` for etcd (P7, etcd.go).
type tool struct {
	name string
	err  error // set: the tool cannot run here, and why
	// shared: the tool's locks live on one server (etcd), so each
	// scenario's lock is a key of its own there, not k in a fresh directory.
	shared bool
	// settle is how long a waiter is left, once seen queued and asleep,
	// for what the harness cannot see to settle before it is woken: on
	// etcd, the server's watcher (etcdSettle).
	settle time.Duration
	// argv runs cmd while holding l, waiting for it as long as it takes.
	argv func(l lockSpec, cmd ...string) []string
	// queued reports whether the process pid is waiting for l: it has
	// asked for the lock and is not holding it. ahead is how many of the
	// harness's contenders for l asked before it (the holder included),
	// for a tool whose queue does not name its waiters' pids.
	queued func(l lockSpec, pid, ahead int) (bool, error)
	// cli runs one of fencerun's other commands (status, list, release)
	// against l's store; nil for a peer that has none.
	cli func(l lockSpec, args ...string) []string
}

// fencerunTool is fencerun on the file backend; runFlags are given to each
// run (and name the tool).
func (h *harness) fencerunTool(bin string, buildErr error, runFlags ...string) *tool {
	name := strings.Join(append([]string{"fencerun"}, runFlags...), " ")
	return h.fencerunOn(name, bin, buildErr, func(l lockSpec) []string { return []string{"--dir", l.dir} }, runFlags...)
}

// fencerunOn is fencerun with the global flags backend gives it for a
// lock, and runFlags given to each run.
func (h *harness) fencerunOn(name, bin string, buildErr error, backend func(l lockSpec) []string, runFlags ...string) *tool {
	t := &tool{name: name, err: buildErr}
	t.argv = func(l lockSpec, cmd ...string) []string {
		argv := append(append(append([]string{bin}, backend(l)...), "run", "--key", l.key), runFlags...)
		if l.ttl > 0 {
			argv = append(argv, "--ttl", l.ttl.String())
		}
		return append(append(argv, "--"), cmd...)
	}
	t.cli = func(l lockSpec, args ...string) []string {
		return append(append([]string{bin}, backend(l)...), args...)
	}
	t.queued = func(l lockSpec, pid, _ int) (bool, error) {
		out, err := h.output(t.cli(l, "status", l.key, "--json"), h.cfg.Guard)
		if err != nil {
			return false, err
		}
		var st struct {
			Waiters []struct {
				PID int `json:"pid"`
			} `json:"waiters"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return false, fmt.Errorf("status --json: %w: %.200s", err, out)
		}
		for _, w := range st.Waiters {
			if w.PID == pid {
				return true, nil
			}
		}
		return false, nil
	}
	return t
}

func (h *harness) flockTool(bin string, lookErr error) *tool {
	t := &tool{name: "flock(1)", err: lookErr}
	t.argv = func(l lockSpec, cmd ...string) []string {
		return append([]string{bin, filepath.Join(l.dir, l.key+".lock")}, cmd...)
	}
	t.queued = blockedInFlock
	return t
}

// floorTool is bench/floor: the least a Go wrapper of a flock does, with a
// renewal's file work at TTL/3 where the lock has a TTL. A floor measured
// beside fencerun, not a peer (pair.floor).
func (h *harness) floorTool(bin string, buildErr error) *tool {
	t := &tool{name: "Go floor, bench/floor", err: buildErr}
	t.argv = func(l lockSpec, cmd ...string) []string {
		argv := []string{bin, l.dir, l.key}
		if l.ttl > 0 {
			argv = append(argv, l.ttl.String())
		}
		return append(append(argv, "--"), cmd...)
	}
	t.queued = blockedInFlock
	return t
}

// blockedInFlock is a tool's queued for a process that waits in flock(2):
// it is listed in /proc/locks behind "->".
func blockedInFlock(_ lockSpec, pid, _ int) (bool, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := strconv.Itoa(pid)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[1] == "->" && fields[2] == "FLOCK" && fields[5] == want {
			return true, nil
		}
	}
	return false, sc.Err()
}
