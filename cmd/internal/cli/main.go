// Package cli is fencerun's command line, shared by the two binaries:
// cmd/fencerun (the file backend) and cmd/fencerun-etcd (the same, with
// the etcd backend linked in). See README.md for the decisions taken where
// the product contract is silent.
//
// This package is wiring only: one kong struct per command, each with a Run
// method; the work is done by store/, fence/, fenced/, supervisor/ and
// resident/. It never links the etcd client itself: a binary that has it
// passes an EtcdOpener to Main, and one that does not execs fencerun-etcd
// for --etcd, so that the file backend's start-up does not pay for the
// client's package initialisation (P1).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/filestore"
)

// Globals are the flags every command takes.
type Globals struct {
	Dir       string      `placeholder:"PATH" help:"State root of the file backend (default: /var/lib/fencerun for root; others $$XDG_STATE_HOME/fencerun, else $$HOME/.local/state/fencerun). Your own and writable by nobody else, or a group store (fencerun init --group): users of different uids share keys only through a group store named by the same --dir."`
	LogLevel  string      `default:"warn" enum:"error,warn,info,debug,trace" help:"Log level: error, warn, info, debug, trace. Logs go to stderr only."`
	LogFormat string      `default:"text" enum:"text,json" help:"Log format: text, or json (one object a line, for every line fencerun writes to stderr)."`
	Quiet     bool        `short:"q" help:"Print nothing but real failures: no conflict, give-up or note lines."`
	Version   versionFlag `short:"V" env:"-" help:"Print the version, Go version and VCS revision, and exit."`
	EtcdFlags

	log     hclog.Logger
	backend store.Store // opened by run, for the tick socket and the lease
}

// CLI is fencerun's command line.
type CLI struct {
	Globals

	Run        RunCmd        `cmd:"" help:"Run a command under a keyed lease or the resident role."`
	Status     StatusCmd     `cmd:"" help:"Show one key's lease and queue, or one store's resident."`
	List       ListCmd       `cmd:"" help:"List every key: state, holder, waiters."`
	Release    ReleaseCmd    `cmd:"" help:"Revoke a lease (--force); the holder's command is stopped."`
	Cancel     CancelCmd     `cmd:"" help:"Ask the holder of a key to stop its command gracefully."`
	Prune      PruneCmd      `cmd:"" help:"Remove expired leases of dead holders, dead waiters, stray temp files and free keys' state."`
	Tick       TickCmd       `cmd:"" help:"From inside a fenced command: stamp a liveness tick."`
	VersionCmd VersionCmd    `cmd:"" name:"version" help:"Print the version, Go version and VCS revision (also --version)."`
	Help       HelpCmd       `cmd:"" help:"Show the help of fencerun or of one command."`
	Init       InitCmd       `cmd:"" help:"Create a store shared by a group: fencerun init --group G DIR."`
	Metrics    MetricsCmd    `cmd:"" help:"Print the Prometheus text exposition of every key and resident store (N3)."`
	History    HistoryCmd    `cmd:"" help:"Show each holding of a key: fence, holder, start, end, how it ended."`
	Completion CompletionCmd `cmd:"" help:"Print a completion script for bash, zsh or fish."`
	Man        ManCmd        `cmd:"" hidden:"" help:"Print the manual page fencerun(1) in roff (just man writes docs/fencerun.1)."`
	OnceReset  OnceResetCmd  `cmd:"" name:"once-reset" help:"Reopen a done --once ID (--force): the next run for it runs its command again."`
}

// etcdBackend is the etcd backend as this binary has it.
var etcdBackend Etcd

// Main runs fencerun with args and returns its exit code. etcd is the etcd
// backend as the binary has it: fencerun has none, and comes here with an
// etcd command line only when its hop to fencerun-etcd failed.
func Main(args []string, etcd Etcd) int {
	etcdBackend = etcd
	hideEnclosingLease()
	// The logger exists before the command line is parsed, so that with
	// --log-format json even a parse error is a JSON line (issue 12).
	early := earlyLogOptions(args)
	log := newLogger(early)
	if etcd.HopFailed != nil {
		// Before kong builds its model: the command line is
		// fencerun-etcd's, which could not be run.
		log.Error(etcd.HopFailed.Error())
		return exitFailed
	}
	var cli CLI
	exit := -1
	parser, err := newParser(&cli, func(code int) { exit = code })
	if err != nil {
		log.Error(err.Error())
		return exitFailed
	}
	if os.Getenv("COMP_LINE") != "" {
		// The shell asks for completions (fencerun completion): answer
		// and exit before anything is parsed.
		return answerCompletion(parser, early)
	}
	if len(args) == 0 {
		return bare(parser, early)
	}
	kctx, err := parser.Parse(args)
	if exit >= 0 { // --help, --version
		return exit
	}
	if err != nil {
		return parseFailed(err, args, parser, early, log)
	}
	if cli.Etcd != "" || etcdFlagGiven(kctx) {
		// An --etcd given empty (--etcd "$UNSET") is refused with the
		// reason, as --etcd , is, never taken as the file backend: a lock
		// meant for every host would be this host's only.
		if err := cli.selectEtcd(kctx); err != nil {
			log.Error(err.Error())
			return exitFailed
		}
	}
	cli.log = newLogger(logOptions{level: cli.LogLevel, json: cli.LogFormat == "json", quiet: cli.Quiet})
	if err := cli.absDir(); err != nil {
		cli.log.Error(err.Error())
		return exitFailed
	}
	ctx := context.Background()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(parser)
	err = kctx.Run(&cli.Globals)
	if cli.backend != nil {
		// run's store, released by now: the etcd backend's Close removes
		// its private tick directory, which would be left in $TMPDIR.
		cli.backend.Close()
	}
	if exit >= 0 { // help COMMAND
		return exit
	}
	return exitOf(err, cli.log)
}

// absDir resolves a relative --dir against the working directory, once,
// and says so: the state root names the lock space, and a relative one
// would name another in every directory the same command line runs in.
func (g *Globals) absDir() error {
	if g.Dir == "" || filepath.IsAbs(g.Dir) {
		return nil
	}
	abs, err := filepath.Abs(g.Dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", g.Dir, err)
	}
	g.log.Warn(fmt.Sprintf("note: --dir %s is relative; using %s (a relative --dir names another state root in each working directory)", g.Dir, abs))
	g.Dir = abs
	return nil
}

// hideEnclosingLease: inside a fenced command, FENCERUN_KEY and
// FENCERUN_RESIDENT describe the enclosing lease (CONTRACT.md: what the
// command is given). Read as the --key and --resident of a nested
// fencerun, they would make it queue behind its own parent forever;
// FENCERUN_TICK tells that they came from a fencerun, not from the user.
// FENCERUN_ONCE is the enclosing run's ID: read as a nested run's --once,
// it would skip the second of two nested runs of one key.
func hideEnclosingLease() {
	if os.Getenv("FENCERUN_TICK") != "" {
		os.Unsetenv("FENCERUN_KEY")
		os.Unsetenv("FENCERUN_RESIDENT")
		os.Unsetenv("FENCERUN_ONCE")
	}
}

// parseFailed reports a command line kong could not parse: the usage for
// a missing command, else the error (125).
func parseFailed(err error, args []string, parser *kong.Kong, early logOptions, log hclog.Logger) int {
	var perr *kong.ParseError
	if errors.As(err, &perr) && perr.Context != nil && perr.Context.Selected() == nil && noCommand(perr) {
		return bare(parser, early)
	}
	// A Validate hook's own error says what was wrong without kong's
	// "run: " in front of it.
	var ours *exitError
	if errors.As(err, &ours) {
		err = ours
	}
	if name := singleDash(args, parser); name != "" {
		// -key reads as -k -e -y, and kong's suggestion would be short
		// flags.
		err = fmt.Errorf("unknown flag -%s: long flags take two dashes: --%s", name, name)
	}
	log.Error(err.Error() + hint(perr))
	return exitFailed
}

// singleDash is the name of a long flag typed with one dash before the
// command's --, as -key for --key: "" when there is none.
func singleDash(args []string, k *kong.Kong) string {
	long := map[string]bool{}
	kong.Visit(k.Model, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok && len(f.Name) > 1 {
			long[f.Name] = true
		}
		return next(nil)
	})
	for _, a := range args {
		if a == "--" {
			break
		}
		if name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && long[name] {
			return name
		}
	}
	return ""
}

// etcdFlagGiven says whether --etcd is on the command line, whatever its
// value.
func etcdFlagGiven(kctx *kong.Context) bool {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == "etcd" {
			return true
		}
	}
	return false
}

// selectEtcd checks the etcd flags. A binary without the backend never
// gets here with them: cmd/fencerun/hop handed its command line on.
func (cli *CLI) selectEtcd(kctx *kong.Context) error {
	if err := cli.checkEtcd(kctx); err != nil {
		return err
	}
	if etcdBackend.Open == nil {
		return fmt.Errorf("--etcd: this binary has no etcd backend; run %s", "fencerun-etcd")
	}
	return nil
}

// newParser is fencerun's kong parser: the one command model that --help,
// the completions and the manual page are made from.
func newParser(cli *CLI, exit func(int)) (*kong.Kong, error) {
	return kong.New(cli, parserOptions(exit)...)
}

// parserOptions are the options of every fencerun parser.
func parserOptions(exit func(int)) []kong.Option {
	return []kong.Option{
		kong.Name("fencerun"),
		kong.Description("Run a command only while it holds a lease; stop its whole process tree the moment the lease is lost."),
		kong.DefaultEnvars("FENCERUN"),
		kong.TypeMapper(reflect.TypeOf(time.Duration(0)), durationMapper),
		kong.Help(printHelp),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Exit(exit),
	}
}

// durationMapper reads every time.Duration flag and its variable as
// flock(1) and timeout(1) users write them: Go durations or bare seconds,
// at most a year (package duration).
var durationMapper = kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
	var s string
	if v := fmt.Sprint(ctx.Scan.Peek().Value); len(v) > 1 && v[0] == '-' && strings.ContainsAny(v[1:2], "0123456789.") {
		// -1 reads as a short flag, and kong would suggest --timeout="-1".
		return fmt.Errorf("%s: durations are not negative", v)
	}
	if err := ctx.Scan.PopValueInto("duration", &s); err != nil {
		return err
	}
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	target.SetInt(int64(d))
	return nil
})

// openStore opens the backend the global flags name. Only commands that
// take a lease create a missing state root (create); the others get an
// error wrapping filestore.ErrNoState, which they report as nothing there.
func (g *Globals) openStore(create bool) (store.Store, error) {
	if g.backend != nil {
		return g.backend, nil
	}
	if g.Etcd != "" {
		s, err := etcdBackend.Open(g.EtcdFlags, g.log)
		if err != nil {
			return nil, fail(exitFailed, "%v", err)
		}
		if create {
			g.backend = s
		}
		return s, nil
	}
	dir := g.Dir
	if dir == "" {
		var err error
		if dir, err = filestore.DefaultRoot(); err != nil {
			return nil, fail(exitFailed, "no state root: %v (set --dir or FENCERUN_DIR)", err)
		}
	}
	s, err := filestore.Open(dir, filestore.Options{Logger: g.log, MustExist: !create})
	if errors.Is(err, filestore.ErrNoState) {
		return nil, &noState{root: dir, err: err}
	}
	if err != nil {
		return nil, fail(exitFailed, "%v", err)
	}
	if create {
		g.backend = s
	}
	return s, nil
}

// noState is a read-only command's missing state root: not a failure,
// an empty result (contract: command line).
type noState struct {
	root string
	err  error
}

func (e *noState) Error() string { return e.err.Error() }
func (e *noState) Unwrap() error { return e.err }

// note says on stderr, in one line, that the state root is missing.
// It is a warning, not a failure: -q silences it, and with --log-format
// json it is a JSON line like every other.
func (e *noState) note(log hclog.Logger) {
	log.Warn(fmt.Sprintf("note: no state root at %s (nothing has run there yet)", e.root))
}

// validKey applies B1 before anything touches the disk.
func validKey(key string) error {
	if err := store.ValidateKey(key); err != nil {
		return usage("%s", strings.TrimPrefix(err.Error(), "store: "))
	}
	return nil
}
