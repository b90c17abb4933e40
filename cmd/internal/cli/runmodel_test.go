package cli

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// Command lines for the run-only model (parseRun) and the whole one. D is
// replaced by a state root of the test's own; fast says that the run-only
// model must take the line (so that a model that never does fails).
var runModelLines = []struct {
	args string
	fast bool
	hops bool // execs fencerun-etcd: not for mainLines, which runs Main in its own process
}{
	{"--dir D run --key k --cgroup off -- true", true, false},
	{"--dir D run --key k -- true", true, false},
	{"--dir D run --key k --cgroup off -- sh -c 'exit 3'", true, false},
	{"--dir D -q --log-level debug run --key k -n --ttl 3s --cgroup off -- true", true, false},
	{"--dir D --log-format json run --key=k --cgroup=off --reason why --name n -E 9 -w 5s -- true", true, false},
	{"run --dir D --key k -w 0 --cgroup off --kill-signal INT --grace 1s --timeout 1m -- true", true, false},
	{"--dir D run --key k --cgroup off -- /nonexistent/command", true, false},
	{"--dir D run --key k --cgroup off -- run", true, false},
	{"--dir D run --key k --cgroup off true", true, false},
	{"--dir D run --resident D/store.db --cgroup off -- true", true, false},
	// Flag values that look like commands or flags, short
	// bundles, = forms, repeats, separators and abbreviations.
	{"--dir D run --key status --cgroup off -- true", true, false},
	{"--dir D run --key run --cgroup off -- true", true, false},
	{"--dir D run --key help --cgroup off -- true", true, false},
	{"--dir D run --key=version --cgroup=off -- true", true, false},
	{"--dir D run --key k --cgroup off -nqE0 -- true", true, false},
	{"--dir D run --key k --cgroup off -w0.5 -E3 -- true", true, false},
	{"--dir D run --key k --cgroup off -E=3 -- true", false, false},
	{"--dir D run --key k --cgroup off -w 1s -w 2s --reason a --reason b -- true", true, false},
	{"--dir D run --key k --key j --cgroup off -- true", true, false},
	{"--dir D run --key k --cgroup off --no-wait=false -- true", true, false},
	{"--dir D run --key k --cgroup off -- --help", true, false},
	{"--dir D run --key k --cgroup off -- -- true", true, false},
	{"--dir D run --key k --cgroup off -- run --key x", true, false},
	{"--dir D --quiet=true run --key k --cgroup off -- true", true, false},
	{"--dir D run --key k --name run --reason status --cgroup off -- true", true, false},
	{"--dir D run --key --help -- true", false, false},
	{"--dir D run --key -h -- true", false, false},
	{"--dir D run --key", false, false},
	{"--dir D run --key k --", false, false},
	{"--dir D run -- true", false, false},
	{"--dir D run --key k -nw0 -- true", false, false},
	{"--dir D run --key k -nw 1s -- true", false, false},
	{"--dir D run --key k -E256 -- true", false, false},
	{"--dir D run --ke k -- true", false, false},
	{"--dir D run --key k --cgroup OFF -- true", false, false},
	{"--dir D run --key k --no-no-wait -- true", false, false},
	{"--dir D run --key k --no-wait=maybe -- true", false, false},
	{"--dir D run --key k --timeout 8760h1s -- true", false, false},
	{"--dir D run --key k --stuck-after -1s -- true", false, false},
	{"--dir D run --key k --build /bin/true -- true", false, false},
	{"--dir D --quiet=maybe run --key k -- true", false, false},
	{"--dir D -qq run --key k -- true", false, false},
	{"--dir D run --key k --force -- true", false, false},
	{"--dir D run --key k --json -- true", false, false},
	{"--dir D run --resident '' -- true", false, false},
	{"-- run --key k -- true", false, false},
	{"run help", false, false},
	{"help run --key", false, false},
	{"ru --key k -- true", false, false},
	{"Run --key k -- true", false, false},
	{"status --resident run", false, false},
	// Refused by run's own checks, kong's, or neither model's command.
	{"--dir D run", false, false},
	{"--dir D run --key k", false, false},
	{"--dir D run --key k --bogus -- true", false, false},
	{"--dir D run --key 'bad key' -- true", false, false},
	{"--dir D run --key k --ttl 10ms -- true", false, false},
	{"--dir D run --key k --ttl soon -- true", false, false},
	{"--dir D run --key k --cgroup maybe -- true", false, false},
	{"--dir D --log-level loud run --key k -- true", false, false},
	{"--dir D run --key k --resident D/store.db -- true", false, false},
	{"--dir D run --key k -n -w 1m -- true", false, false},
	{"--dir D run --key k -E 300 -- true", false, false},
	{"--dir D run --key k --kill-signal NOPE -- true", false, false},
	{"--dir D --log-format json run --bogus", false, false},
	{"--dir D runx --key k -- true", false, false},
	{"--dir D status run", false, false},
	{"--dir D status k", false, false},
	{"--dir D list", false, false},
	{"--dir D release k --force", false, false},
	{"help run", false, false},
	{"run --help", false, false},
	{"run -h", false, false},
	{"--help", false, false},
	{"-h run", false, false},
	{"--version", false, false},
	{"-V run --key k -- true", false, false},
	{"run --key k --version -- true", false, false},
	{"run -qV", false, false},
	{"version", false, false},
	{"--etcd '' run --key k -- true", false, true},
	{"", false, false},
	{"--dir D", false, false},
}

// The environments the lines are read in: variables of run's flags, of
// the globals and of other commands' flags, good and bad.
var runModelEnvs = [][]string{
	nil,
	{"FENCERUN_TTL=5s", "FENCERUN_CGROUP=off"},
	{"FENCERUN_TTL=soon"},
	{"FENCERUN_LOG_LEVEL=loud"},
	{"FENCERUN_LOG_FORMAT=json", "FENCERUN_QUIET=true"},
	{"FENCERUN_WAIT=10m"},
	{"FENCERUN_CONFLICT_EXIT_CODE=0"},
	{"FENCERUN_KEY=k2"},
	{"FENCERUN_JSON=maybe", "FENCERUN_EXIT_CODE=maybe", "FENCERUN_HELD=maybe", "FENCERUN_CANCEL_WAIT=soon"},
	{"FENCERUN_RESIDENT=/nowhere/x.db"},
	{"FENCERUN_DIAL_TIMEOUT=soon"},
}

func splitArgs(t *testing.T, line, dir string) []string {
	t.Helper()
	if line == "" {
		return nil
	}
	out, err := exec.Command("sh", "-c", `for a in `+line+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "D", dir)
	}
	return args
}

// A command line the run-only model accepts, it reads as the whole model
// does: the same globals and run flags, the same command, the same flags
// typed and given; and it prints nothing (help and version are the whole
// model's to print).
func TestRunModelParsesAsTheWholeModel(t *testing.T) {
	var cli CLI
	k, _ := parseRun(&cli, []string{"run", "--key", "k", "--", "true"})
	if k == nil {
		t.Fatal("the run-only model refused run --key k -- true")
	}
	if len(k.Model.Children) != 1 || k.Model.Children[0].Name != "run" {
		t.Errorf("the run-only model has more commands than run (add them to runOnly): %v", k.Model.Children)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "store.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range runModelEnvs {
		for _, line := range runModelLines {
			t.Run(strings.Join(env, ",")+" "+line.args, func(t *testing.T) {
				for _, kv := range env {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, v)
				}
				args := splitArgs(t, line.args, dir)
				var fast CLI
				_, fctx := parseRun(&fast, args)
				if fctx == nil {
					if env == nil && line.fast {
						t.Fatal("the run-only model did not take this line")
					}
					if !reflect.DeepEqual(fast, CLI{}) {
						t.Errorf("a refused parse left the command line's struct written: %+v", fast)
					}
					return
				}
				var whole CLI
				exit := -1
				wp, err := kong.New(&whole, append(parserOptions(func(c int) { exit = c }), kong.Writers(io.Discard, io.Discard))...)
				if err != nil {
					t.Fatal(err)
				}
				wctx, err := wp.Parse(args)
				if err != nil || exit >= 0 {
					t.Fatalf("the run-only model took a line the whole one refuses: %v, exit %d", err, exit)
				}
				if !reflect.DeepEqual(fast.Globals, whole.Globals) {
					t.Errorf("globals differ:\nrun-only %+v\nwhole    %+v", fast.Globals, whole.Globals)
				}
				if !reflect.DeepEqual(fast.Run, whole.Run) {
					t.Errorf("run's flags differ:\nrun-only %+v\nwhole    %+v", fast.Run, whole.Run)
				}
				if fctx.Command() != wctx.Command() {
					t.Errorf("command %q, the whole model's %q", fctx.Command(), wctx.Command())
				}
				for _, f := range wctx.Flags() {
					if typed(fctx, f.Name) != typed(wctx, f.Name) || given(fctx, f.Name) != given(wctx, f.Name) {
						t.Errorf("--%s: typed %v given %v, the whole model's typed %v given %v", f.Name,
							typed(fctx, f.Name), given(fctx, f.Name), typed(wctx, f.Name), given(wctx, f.Name))
					}
				}
				if len(fctx.Flags()) != len(wctx.Flags()) {
					t.Errorf("%d flags on the path, the whole model's %d", len(fctx.Flags()), len(wctx.Flags()))
				}
			})
		}
	}
}

// Main prints the same bytes and exits with the same code with the
// run-only model as with the whole model alone, over every line above and
// five of the environments: a process of this test binary per model and
// environment runs Main on every line (mainLines).
func TestMainIsTheSameWithTheRunModel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "store.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var lines [][]string
	for _, line := range runModelLines {
		if !line.hops {
			lines = append(lines, splitArgs(t, line.args, dir))
		}
	}
	linesFile := filepath.Join(dir, "lines.json")
	b, err := json.Marshal(lines)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(linesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	main := func(model string, env []string) []mainResult {
		cmd := exec.Command(self)
		// In the test's directory: a line with a relative --dir (--dir
		// run run ...) makes its state root there, not in the source tree.
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "FRTEST_CLI_MAIN="+model, "FRTEST_CLI_LINES="+linesFile), env...)
		// In the test's own directory: a line's relative --dir (--dir run)
		// makes its state root there, not in the package's source tree.
		cmd.Dir = dir
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", model, env, err)
		}
		var res []mainResult
		if err := json.Unmarshal(out, &res); err != nil || len(res) != len(lines) {
			t.Fatalf("%s %v: %d results of %d (%v): %q", model, env, len(res), len(lines), err, out)
		}
		return res
	}
	for _, env := range [][]string{nil, {"FENCERUN_TTL=soon"}, {"FENCERUN_LOG_FORMAT=json", "FENCERUN_QUIET=true"}, runModelEnvs[8], {"FENCERUN_KEY=k2"}} {
		fast, whole := main("run", env), main("whole", env)
		for i, args := range lines {
			if fast[i] != whole[i] {
				t.Errorf("%v %q: with the run-only model %+v; the whole model alone %+v", env, args, fast[i], whole[i])
			}
		}
	}
}

// mainResult is what Main did with one command line: its exit code and
// what it wrote, log lines' times left out.
type mainResult struct {
	Code           int
	Stdout, Stderr string
}

// stamped are the times at the start of a log line, text or JSON.
var stamped = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z |"@timestamp":"[^"]*"`)

// mainLines runs Main on every command line of the JSON file
// $FRTEST_CLI_LINES, one after the other, with os.Stdout and os.Stderr
// each a file of its own, and prints the results as JSON.
func mainLines() int {
	b, err := os.ReadFile(os.Getenv("FRTEST_CLI_LINES"))
	if err != nil {
		panic(err)
	}
	var lines [][]string
	if err := json.Unmarshal(b, &lines); err != nil {
		panic(err)
	}
	stdout, stderr := os.Stdout, os.Stderr
	read := func(f *os.File) string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			panic(err)
		}
		f.Close()
		os.Remove(f.Name())
		return stamped.ReplaceAllString(string(b), "T")
	}
	var res []mainResult
	for _, args := range lines {
		o, err1 := os.CreateTemp("", "frtest-out")
		e, err2 := os.CreateTemp("", "frtest-err")
		if err := errors.Join(err1, err2); err != nil {
			panic(err)
		}
		os.Stdout, os.Stderr = o, e
		code := Main(args, nil)
		os.Stdout, os.Stderr = stdout, stderr
		res = append(res, mainResult{code, read(o), read(e)})
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		panic(err)
	}
	return 0
}

// TestMain is also mainLines, for TestMainIsTheSameWithTheRunModel.
func TestMain(m *testing.M) {
	switch os.Getenv("FRTEST_CLI_MAIN") {
	case "run":
		os.Exit(mainLines())
	case "whole":
		runModel = false
		os.Exit(mainLines())
	}
	os.Exit(m.Run())
}
