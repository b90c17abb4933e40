package integration

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// S2 against a fork-hopper (testdata/contain/hopper.c: on SIGTERM each
// generation forks, the child calls setsid, the parent exits, bounded to
// 2000 generations and 5 s from the SIGTERM, and 60 s of waiting for it):
// nothing of it survives fencerun's exit, on a normal exit, on release
// --force and on --timeout (0.5 s: on a loaded machine a run whose timeout
// fired before sh started the hopper tested nothing, and at most 5 such
// runs of 20 are taken), 20 runs each, with a cgroup and without one. Before the freeze and the cgroups, 19, 20 and
// 18 runs of 20 left it running.
//
// Each run's fencerun is started into a cgroup of the test's own, so that
// a survivor is seen exactly (populated 1 after fencerun exited) and is
// killed with cgroup.kill whatever it did.
func TestForkHopperNeverSurvives(t *testing.T) {
	hopper := buildC(t, "hopper")
	for _, mode := range []string{"auto", "off"} {
		for _, end := range []string{"exit", "release", "timeout"} {
			t.Run(mode+"/"+end, func(t *testing.T) {
				t.Parallel()
				s := newSandbox(t)
				survived, missed := 0, 0
				for i := range 20 {
					key := fmt.Sprintf("hop-%d", i)
					hop := s.path(key + ".pid")
					cg := newTestCgroup(t)
					args := []string{"run", "--key", key, "--grace", "0.1s", "--cgroup", mode}
					script := hopper + " " + hop + ` & while [ ! -s ` + hop + ` ]; do sleep 0.01; done`
					want := 0
					switch end {
					case "release":
						script += "; wait"
						want = 76
					case "timeout":
						script += "; wait"
						args = append(args, "--timeout", "0.5s")
						want = 124
					}
					c := s.fencerun(key, append(args, "--", "sh", "-c", script)...)
					cg.start(t, c)
					if end == "release" {
						waitFile(t, hop)
						if code := s.run("release", "release", key, "--force"); code != 0 {
							t.Fatalf("release --force: exit %d", code)
						}
					}
					if code := exitOf(t, c); code != want {
						t.Errorf("run %d: exit %d, want %d", i, code, want)
					}
					if _, err := os.Stat(hop); err != nil {
						if end != "timeout" {
							t.Fatalf("run %d: the hopper never started: %v", i, err)
						}
						// The timeout can fire before sh has started the
						// hopper on a loaded machine: that run tested no
						// hopper (survivors are still looked for below).
						t.Logf("run %d: --timeout fired before the hopper started: %v", i, err)
						missed++
					}
					if cg.populated(t) {
						survived++
						t.Errorf("run %d: processes of the hopper survived fencerun: %v", i, cg.procs(t))
					}
					cg.remove(t)
				}
				if survived > 0 {
					t.Errorf("%s: the hopper survived %d of 20 runs", end, survived)
				}
				if missed > 5 {
					t.Errorf("%s: in %d of 20 runs the hopper never started before --timeout fired: too few runs tested it", end, missed)
				}
			})
		}
	}
}

// S2 (issue 26, point 10): a set-group-ID command, whose exec clears the
// parent-death signal, still dies when its wrapper is SIGKILLed: a watcher
// stands in. Before, it outlived the wrapper (9/9) until the next holder.
// So does a script whose interpreter is set-group-ID, which the exec of
// the script makes the process (before: it outlived the wrapper, 3/3).
func TestSetIDCommandDiesWithItsWrapper(t *testing.T) {
	t.Run("program", func(t *testing.T) {
		t.Parallel()
		setgid := setgidSleep(t)
		setIDCommandDiesWithItsWrapper(t, setgid, setgid, "1000")
	})
	t.Run("interpreter", func(t *testing.T) {
		t.Parallel()
		tail := setgidCopy(t, "/usr/bin/tail")
		script := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(script, []byte("#!"+tail+" -f\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		setIDCommandDiesWithItsWrapper(t, tail, script)
	})
}

// setIDCommandDiesWithItsWrapper runs argv under a wrapper, waits for its
// command to run exe, SIGKILLs the wrapper and waits for the command to
// die.
func setIDCommandDiesWithItsWrapper(t *testing.T, exe string, argv ...string) {
	s := newSandbox(t)
	c := s.fencerun("holder", append([]string{"run", "--key", "k", "--cgroup", "off", "--"}, argv...)...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	s.start(c)
	var cmd int
	if err := waitFor(func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", c.Process.Pid))
		var kids []int
		for _, f := range tasks {
			kids = append(kids, readPids(f)...)
		}
		for _, k := range kids {
			if e, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", k)); e == exe {
				cmd = k
			}
		}
		return cmd != 0
	}); err != nil {
		t.Fatalf("the command never ran %s", exe)
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitOf(t, c)
	t.Cleanup(func() { syscall.Kill(cmd, syscall.SIGKILL) })
	waitGone(t, cmd)
}

// setgidSleep is a copy of sleep, set-group-ID to nogroup.
func setgidSleep(t *testing.T) string { return setgidCopy(t, "/bin/sleep") }

// setgidCopy is a copy of the program at path, set-group-ID to nogroup.
func setgidCopy(t *testing.T, path string) string {
	setgid := filepath.Join(t.TempDir(), filepath.Base(path)+"-setgid")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setgid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(setgid, 0, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(setgid, 0o755|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	return setgid
}

// leftoverKinds start, under a wrapper that is then SIGKILLed, a process of
// each kind that a search by environment misses, and write their pids: an
// `env -i` process in the command's group, a `setsid env -i` double fork,
// a process that rewrote its title over its environment, a non-dumpable
// one, and the command itself exec'ing a setgid program (which clears the
// parent-death signal, so it outlives the wrapper).
func leftoverKinds(t *testing.T, s *sandbox) string {
	left := buildC(t, "leftover")
	setgid := setgidSleep(t)
	return `env -i /bin/sleep 1000 & echo $! > envi.pid
(setsid env -i /bin/sleep 1000 & echo $! > setsid.pid)
` + left + ` title title.pid &
` + left + ` nondumpable nondumpable.pid &
while [ ! -s title.pid ] || [ ! -s nondumpable.pid ]; do sleep 0.01; done
echo $$ > setgid.pid
exec ` + setgid + ` 1000`
}

var leftoverFiles = []string{"envi.pid", "setsid.pid", "title.pid", "nondumpable.pid", "setgid.pid"}

// killHolderLeavingKinds runs leftoverKinds under a holder of key in cg,
// SIGKILLs the wrapper once every kind runs (the command as the setgid
// program), and returns the wrapper's pid and the leftovers' pids.
func killHolderLeavingKinds(t *testing.T, s *sandbox, cg *testCgroup, key, mode string) (int, map[string]int) {
	c := s.fencerun("holder", "run", "--key", key, "--cgroup", mode, "--", "sh", "-c", leftoverKinds(t, s))
	cg.start(t, c)
	pids := map[string]int{}
	for _, f := range leftoverFiles {
		pids[f] = readPids(waitPidFile(t, s.path(f)))[0]
	}
	s.waitRecorded(t, key)
	// The setsid double fork has escaped only once it leads a session of
	// its own, has exec'd sleep through env -i (no marker left in it) and
	// has the wrapper, the subreaper, for its parent: the subshell that
	// forked it, which carries the marker, is gone. Before that the next
	// holder finds it, rightly, by its group, its environment or its
	// parent; on a loaded machine the wrapper could be killed that early.
	escaper, wrapper := pids["setsid.pid"], strconv.Itoa(c.Process.Pid)
	if err := waitFor(func() bool {
		f := procStat(escaper)
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", escaper))
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", escaper))
		return len(f) > 3 && f[1] == wrapper && f[3] == strconv.Itoa(escaper) &&
			filepath.Base(exe) == "sleep" && err == nil && !strings.Contains(string(env), "FENCERUN_TICK=")
	}); err != nil {
		t.Fatalf("the setsid double fork (pid %d) never escaped: stat %q", escaper, procStat(escaper))
	}
	setgid := pids["setgid.pid"]
	if err := waitFor(func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", setgid))
		return strings.HasSuffix(exe, "sleep-setgid")
	}); err != nil {
		t.Fatal("the command never exec'd the setgid program")
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitOf(t, c)
	for f, pid := range pids {
		if !alive(pid) {
			t.Fatalf("%s: pid %d died with the wrapper: the scenario did not happen", f, pid)
		}
	}
	return c.Process.Pid, pids
}

// waitRecorded waits until key's record names its holder's command (status
// shows command_pid): from then on a SIGKILL of the wrapper leaves its
// process group and session recorded. (Before, in the moment between the
// start and that write, only the marker and the cgroup are.)
func (s *sandbox) waitRecorded(t *testing.T, key string) {
	t.Helper()
	waitRecordedIn(t, s.state, key)
}

// waitRecordedIn is waitRecorded for the store at state.
func waitRecordedIn(t *testing.T, state, key string) {
	t.Helper()
	if err := waitFor(func() bool {
		out, _ := fencerun(state, "status", key, "--json").Output()
		var st struct {
			Holder *struct {
				CommandPID int `json:"command_pid"`
			} `json:"holder"`
		}
		return json.Unmarshal(out, &st) == nil && st.Holder != nil && st.Holder.CommandPID != 0
	}); err != nil {
		t.Fatalf("the record of %s never named the command", key)
	}
}

// leftoversView is the "leftovers" object of status --json.
type leftoversView struct {
	HolderPID int    `json:"holder_pid"`
	Count     int    `json:"count"`
	Cgroup    string `json:"cgroup"`
}

func (s *sandbox) leftovers(t *testing.T, key string) (string, *leftoversView) {
	t.Helper()
	out, err := fencerun(s.state, "status", key, "--json").Output()
	if err != nil {
		t.Fatalf("status --json: %v", err)
	}
	var st struct {
		State     string         `json:"state"`
		Leftovers *leftoversView `json:"leftovers"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v in %s", err, out)
	}
	return st.State, st.Leftovers
}

// S2 with a cgroup: after a SIGKILL of the wrapper, every kind of leftover
// is shown by status and list, and stopped exactly, by the next holder
// before its command starts, or by prune alone.
func TestLeftoversOfAKilledWrapperInItsCgroup(t *testing.T) {
	for _, by := range []string{"next holder", "prune"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			cg := newTestCgroup(t)
			defer cg.remove(t)
			wrapper, pids := killHolderLeavingKinds(t, s, cg, "job", "auto")

			state, l := s.leftovers(t, "job")
			if state != "free" || l == nil || l.HolderPID != wrapper || l.Count < len(pids) || l.Cgroup == "" {
				t.Fatalf("status: state %q, leftovers %+v; want free with %d or more processes of dead holder pid %d in a cgroup", state, l, len(pids), wrapper)
			}
			text, _ := fencerun(s.state, "status", "job").Output()
			if want := fmt.Sprintf("leftovers: %d processes of dead holder pid %d", l.Count, wrapper); !strings.Contains(string(text), want) {
				t.Errorf("status says\n%s\nwant a line %q", text, want)
			}
			list, _ := fencerun(s.state, "list").Output()
			if !strings.Contains(string(list), "leftovers:") {
				t.Errorf("list does not mark the key:\n%s", list)
			}

			switch by {
			case "next holder":
				script := `for p in ` + pidList(pids) + `; do st=$(awk '{print $3}' /proc/$p/stat 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && echo "alive $p"; done > saw; true`
				if code := s.run("next", "run", "--key", "job", "--grace", "1s", "--", "sh", "-c", script); code != 0 {
					t.Fatalf("next holder: exit %d", code)
				}
				if saw, _ := os.ReadFile(s.path("saw")); len(saw) > 0 {
					t.Errorf("the next holder's command ran beside the dead holder's leftovers:\n%s", saw)
				}
			case "prune":
				out, err := fencerun(s.state, "prune", "--json").Output()
				if err != nil {
					t.Fatalf("prune --json: %v", err)
				}
				var pruned []struct {
					Key       string `json:"key"`
					What      string `json:"what"`
					HolderPID int    `json:"holder_pid"`
					Count     int    `json:"count"`
				}
				if err := json.Unmarshal(out, &pruned); err != nil {
					t.Fatalf("prune --json: %v in %s", err, out)
				}
				found := false
				for _, p := range pruned {
					found = found || p.Key == "job" && p.What == "leftovers" && p.HolderPID == wrapper && p.Count >= len(pids)
				}
				if !found {
					t.Errorf("prune --json: %s; want job's leftovers of pid %d", out, wrapper)
				}
			}
			for f, pid := range pids {
				if alive(pid) {
					t.Errorf("%s: pid %d is still alive", f, pid)
				}
			}
			if cg.populated(t) {
				t.Errorf("processes left: %v", cg.procs(t))
			}
			if _, err := os.Stat(l.Cgroup); !os.IsNotExist(err) {
				t.Errorf("the dead holder's cgroup %s is still there", l.Cgroup)
			}
			if state, l := s.leftovers(t, "job"); state != "free" || l != nil {
				t.Errorf("status after: state %q, leftovers %+v", state, l)
			}
		})
	}
}

// S2 without cgroups, as the README promises: after a SIGKILL of the
// wrapper the next holder stops the command's process group (an `env -i`
// process in it included, and the title rewriter and the non-dumpable one,
// which are in it too) and every process carrying the marker. What left the
// group and cleared its environment (setsid env -i) is not found: the
// README says so, and cgroups close it.
func TestLeftoversOfAKilledWrapperWithoutCgroup(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	cg := newTestCgroup(t)
	defer cg.remove(t)
	_, pids := killHolderLeavingKinds(t, s, cg, "job", "off")
	if code := s.run("next", "run", "--key", "job", "--cgroup", "off", "--grace", "1s", "--", "true"); code != 0 {
		t.Fatalf("next holder: exit %d", code)
	}
	for f, pid := range pids {
		switch {
		case f == "setsid.pid" && !alive(pid):
			t.Errorf("%s: pid %d was found without a cgroup: the README's non-guarantee is out of date", f, pid)
		case f != "setsid.pid" && alive(pid):
			t.Errorf("%s: pid %d is still alive", f, pid)
		}
	}
}

// --cgroup require where the hierarchy is mounted read-only (in a mount
// namespace of the test's own: nothing is unmounted): 125 with the reason,
// and no command.
func TestCgroupRequireWithoutHierarchy(t *testing.T) {
	t.Parallel()
	mount := cgroup2MountPoint(t)
	s := newSandbox(t)
	script := `mount -o remount,bind,ro ` + mount + ` && exec "$@"`
	c := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
		bin, "run", "--key", "k", "--cgroup", "require", "--", "touch", "ran")
	c.Env = append(os.Environ(), "FENCERUN_DIR="+s.state)
	c.Dir = s.work
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 125 || !strings.Contains(string(out), "--cgroup require") || !strings.Contains(string(out), "read-only") {
		t.Errorf("exit %d, output %q; want 125 saying the hierarchy is read-only", code, out)
	}
	if _, err := os.Stat(s.path("ran")); err == nil {
		t.Error("the command ran")
	}
}

func pidList(pids map[string]int) string {
	var b strings.Builder
	for _, p := range pids {
		fmt.Fprintf(&b, "%d ", p)
	}
	return b.String()
}

// waitPidFile waits for a file that holds a pid and returns its path.
func waitPidFile(t *testing.T, path string) string {
	t.Helper()
	if err := waitFor(func() bool { return len(readPids(path)) > 0 }); err != nil {
		t.Fatalf("%s never held a pid", path)
	}
	return path
}

var (
	cBuild sync.Mutex
	cBins  = map[string]string{}
)

// buildC compiles testdata/contain/NAME.c once for the package.
func buildC(t *testing.T, name string) string {
	t.Helper()
	cBuild.Lock()
	defer cBuild.Unlock()
	if p, ok := cBins[name]; ok {
		return p
	}
	out := filepath.Join(filepath.Dir(bin), name)
	if b, err := exec.Command("gcc", "-O2", "-o", out, filepath.Join("testdata", "contain", name+".c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s.c: %v\n%s", name, err, b)
	}
	cBins[name] = out
	return out
}

// testCgroup is a cgroup of the test's own, below the one the test runs in.
type testCgroup struct{ path string }

// cgroup2MountPoint is where the cgroup v2 hierarchy is mounted; the test
// skips where there is none (CI and this project's machines have one).
func cgroup2MountPoint(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, _ := strings.Cut(sc.Text(), " - ")
		if fs, gs := strings.Fields(pre), strings.Fields(post); len(fs) > 4 && len(gs) > 0 && gs[0] == "cgroup2" {
			return fs[4]
		}
	}
	t.Skip("no cgroup2 hierarchy mounted")
	return ""
}

func newTestCgroup(t *testing.T) *testCgroup {
	t.Helper()
	mount := cgroup2MountPoint(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	var r [8]byte
	rand.Read(r[:])
	cg := &testCgroup{filepath.Join(mount, own, "fr-contain-test-"+hex.EncodeToString(r[:]))}
	if err := os.Mkdir(cg.path, 0o755); err != nil {
		t.Skipf("no writable cgroup v2 hierarchy: %v", err)
	}
	t.Cleanup(func() { cg.remove(t) })
	return cg
}

// start starts c in the cgroup from its first instruction.
func (cg *testCgroup) start(t *testing.T, c *exec.Cmd) {
	t.Helper()
	d, err := os.Open(cg.path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd()), Setsid: c.SysProcAttr != nil && c.SysProcAttr.Setsid}
	if err := c.Start(); err != nil {
		t.Fatalf("%v: %v", c.Args, err)
	}
}

// startSession is start with c leading a session of its own.
func (cg *testCgroup) startSession(t *testing.T, c *exec.Cmd) {
	t.Helper()
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cg.start(t, c)
}

// populated reports whether a live process is left in the cgroup or below.
func (cg *testCgroup) populated(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.path, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "populated 1")
}

// procs describes the processes left in the cgroup and below.
func (cg *testCgroup) procs(t *testing.T) []string {
	var out []string
	filepath.WalkDir(cg.path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(cmd))))
		}
		return nil
	})
	return out
}

// remove kills whatever is left in the cgroup, waits for it to empty, and
// removes it and the cgroups below it.
func (cg *testCgroup) remove(t *testing.T) {
	if _, err := os.Stat(cg.path); err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(cg.path, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(guard)
	for cg.populated(t) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var dirs []string
	filepath.WalkDir(cg.path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && err != syscall.ENOENT {
			t.Errorf("removing cgroup %s: %v", dirs[i], err)
		}
	}
}

// A pid namespace without a /proc of its own (unshare --pid --fork without
// --mount-proc): fencerun, its init, sees another namespace's /proc. It
// still exits with the command's code, stops a TERM-ignoring descendant
// that left the group on --timeout (124), reaps, and never hangs on, or
// touches, the processes that /proc shows.
func TestPidNamespaceWithoutItsProc(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			cg := newTestCgroup(t)
			unrelated := s.start(exec.Command("sleep", "1000"))
			defer func() { unrelated.Process.Kill(); unrelated.Wait() }()
			run := func(want int, args ...string) {
				t.Helper()
				c := exec.Command("unshare", append([]string{"--pid", "--fork", bin, "run", "--key", "k", "--cgroup", mode}, args...)...)
				s.prepare(c, "ns")
				c.Env = append(c.Env, "FENCERUN_DIR="+s.state)
				cg.start(t, c)
				if code := exitOf(t, c); code != want {
					t.Errorf("exit %d, want %d", code, want)
				}
				if cg.populated(t) {
					t.Errorf("processes left: %v", cg.procs(t))
				}
			}
			run(3, "--", "sh", "-c", "sleep 0.1 & exit 3")
			run(124, "--grace", "0.2s", "--timeout", "0.3s", "--", "sh", "-c",
				`setsid sh -c 'trap "" TERM; while :; do sleep 1; done' & sleep 1000`)
			if !alive(unrelated.Process.Pid) {
				t.Error("a process outside the namespace was stopped")
			}
		})
	}
}

// Without cgroups, when fencerun leads its session (setsid fencerun, a
// systemd service), a leftover that left the command's group (setpgid)
// and cleared its environment is still found after a SIGKILL of the
// wrapper: it is in the session the record names.
func TestLeftoverInTheWrappersSessionWithoutCgroup(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	cg := newTestCgroup(t)
	c := s.fencerun("holder", "run", "--key", "job", "--cgroup", "off", "--", "sh", "-c",
		`env -i /usr/bin/perl -e 'setpgrp(0, 0); open(F, ">", "pg.tmp"); print F "$$\n"; close F; rename "pg.tmp", "pg.pid"; sleep 1000' & wait`)
	cg.startSession(t, c)
	pid := readPids(waitPidFile(t, s.path("pg.pid")))[0]
	s.waitRecorded(t, "job")
	if q := procStat(pid); len(q) < 3 || q[2] != strconv.Itoa(pid) {
		t.Fatalf("the leftover did not leave the command's group: %v", q)
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exitOf(t, c)
	if !alive(pid) {
		t.Fatal("the leftover died with the wrapper: the scenario did not happen")
	}
	if code := s.run("next", "run", "--key", "job", "--cgroup", "off", "--grace", "1s", "--", "true"); code != 0 {
		t.Fatalf("next holder: exit %d", code)
	}
	if alive(pid) {
		t.Errorf("the leftover %d in the dead wrapper's session is still alive", pid)
	}
}

// stubbornTree is a command whose descendant left the group and ignores
// TERM; it writes that descendant's pid to stubborn.pid.
const stubbornTree = `setsid sh -c 'trap "" TERM; echo $$ > stubborn.tmp; mv stubborn.tmp stubborn.pid; while :; do sleep 1; done' & sleep 1000`

// S7: each fatal signal sent to fencerun with kill stops the tree (the
// TERM-ignoring descendant that left the group included), releases, and
// exits 128+N, without a Go stack dump. SIGSTKFLT (issue 24, N4) crashed
// fencerun with a stack dump and left the tree running.
func TestFatalSignalsStopTheTree(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL,
		syscall.SIGFPE, syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGSTKFLT} {
		t.Run(unixName(sig), func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			cg := newTestCgroup(t)
			c := s.fencerun("holder", "run", "--key", "job", "--grace", "0.2s", "--", "sh", "-c", stubbornTree)
			cg.start(t, c)
			stubborn := readPids(waitPidFile(t, s.path("stubborn.pid")))[0]
			if err := c.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := exitOf(t, c); code != 128+int(sig) {
				t.Errorf("exit %d, want %d", code, 128+int(sig))
			}
			if alive(stubborn) || cg.populated(t) {
				t.Errorf("processes left: %v", cg.procs(t))
			}
			if log, _ := os.ReadFile(s.path("holder.log")); strings.Contains(string(log), "goroutine ") {
				t.Errorf("a stack dump:\n%s", log)
			}
			if st := s.status("job"); st.State != "free" {
				t.Errorf("key %s after the signal, want free", st.State)
			}
		})
	}
}

// S7: a closed stderr never kills fencerun: with its reader gone before
// the first log line, a run past --timeout still stops its tree (the
// TERM-ignoring descendant included), releases and exits 124, not 141.
func TestClosedStderr(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	cg := newTestCgroup(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := fencerun(s.state, "run", "--key", "job", "--grace", "0.2s", "--timeout", "0.3s", "--", "sh", "-c", stubbornTree+" 2>/dev/null")
	c.Dir = s.work
	c.Env = append(c.Env, s.mark)
	c.Stdout, c.Stderr = w, w
	r.Close() // the reader is gone: every write to stderr fails with EPIPE
	cg.start(t, c)
	w.Close()
	stubborn := readPids(waitPidFile(t, s.path("stubborn.pid")))[0]
	if code := exitOf(t, c); code != 124 {
		t.Errorf("exit %d, want 124", code)
	}
	if alive(stubborn) || cg.populated(t) {
		t.Errorf("processes left: %v", cg.procs(t))
	}
	if st := s.status("job"); st.State != "free" {
		t.Errorf("key %s, want free", st.State)
	}
}

func unixName(sig syscall.Signal) string {
	return strings.ToUpper(strings.ReplaceAll(sig.String(), " ", "-"))
}
