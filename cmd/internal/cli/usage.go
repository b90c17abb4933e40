package cli

// What fencerun says about itself: help, usage, version, and the logger
// every line on stderr goes through.

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"
)

// logOptions are what the logger needs from the global flags.
type logOptions struct {
	level string
	json  bool
	quiet bool
}

// newLogger is fencerun's one root logger. --quiet keeps only errors:
// real failures.
func newLogger(o logOptions) hclog.Logger {
	level := hclog.LevelFromString(o.level)
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	if o.quiet {
		level = hclog.Error
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "fencerun",
		Level:      level,
		Output:     quietWriter{os.Stderr},
		JSONFormat: o.json,
	})
}

// quietWriter drops what cannot be written: a closed stderr (a pipe whose
// reader is gone) must neither kill fencerun nor change how a run ends
// (S7). fencerun catches SIGPIPE while it runs a command, so the write only
// fails.
type quietWriter struct{ w io.Writer }

func (q quietWriter) Write(b []byte) (int, error) {
	_, _ = q.w.Write(b)
	return len(b), nil
}

// earlyLogOptions reads the logging flags before kong parses anything, so
// that a parse error is logged as the user asked: the flags before the
// command's "--", else their variables.
func earlyLogOptions(args []string) logOptions {
	o := logOptions{
		level: os.Getenv("FENCERUN_LOG_LEVEL"),
		json:  os.Getenv("FENCERUN_LOG_FORMAT") == "json",
	}
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		switch name {
		case "--log-format":
			o.json = value == "json"
		case "--log-level":
			o.level = value
		}
	}
	return o
}

// bare is `fencerun` without a command: the usage on stderr and 125, as a
// mistyped command line is (contract: command line). With --log-format json it
// is one JSON line, as everything fencerun writes to stderr then is.
func bare(k *kong.Kong, o logOptions) int {
	var names []string
	for _, c := range k.Model.Children {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	if o.json {
		newLogger(o).Error("a command is needed", "usage", "fencerun [global flags] COMMAND [ARG...]",
			"commands", strings.Join(names, ", "), "help", "fencerun --help")
		return exitFailed
	}
	w := os.Stderr
	fmt.Fprintln(w, "Usage: fencerun [global flags] COMMAND [ARG...]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, c := range k.Model.Children {
		if !c.Hidden {
			fmt.Fprintf(w, "  %-*s  %s\n", width, c.Name, c.Help)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "fencerun --help" for the global flags and examples, "fencerun help COMMAND" for one command.`)
	return exitFailed
}

// noCommand reports whether a parse failed only because no command was
// named (fencerun --dir x): that is a bare fencerun too.
func noCommand(perr *kong.ParseError) bool {
	return strings.HasPrefix(perr.Error(), "expected one of") || strings.HasPrefix(perr.Error(), "expected \"")
}

// hint points a parse error at the help that explains it.
func hint(perr *kong.ParseError) string {
	if perr != nil && perr.Context != nil {
		if cmd := perr.Context.Selected(); cmd != nil {
			return fmt.Sprintf(" (see fencerun help %s)", cmd.Name)
		}
	}
	return " (see fencerun --help)"
}

// A command's usage line and examples, where kong's own would not say it:
// the usage line in the real shape of the command line, and examples to end
// its --help and the manual page with.
type (
	usageLiner interface{ Usage() string }
	exampler   interface{ Examples() string }
)

func commandOf(n *kong.Node) any {
	if n == nil || !n.Target.IsValid() {
		return nil
	}
	if n.Target.CanAddr() {
		return n.Target.Addr().Interface()
	}
	return n.Target.Interface()
}

// usageLine is the shape of a command's command line.
func usageLine(n *kong.Node) string {
	if u, ok := commandOf(n).(usageLiner); ok {
		return "fencerun " + u.Usage()
	}
	return "fencerun " + n.Summary()
}

// examplesOf is a command's examples, or "".
func examplesOf(n *kong.Node) string {
	if e, ok := commandOf(n).(exampler); ok {
		return e.Examples()
	}
	return ""
}

// printHelp is kong's help with fencerun's usage lines, the global flags
// shown once (in fencerun --help, not again under every command) and
// examples at the end.
func printHelp(options kong.HelpOptions, kctx *kong.Context) error {
	w := kctx.Stdout
	options.NoAppSummary = true
	node := kctx.Model.Node
	if cmd := kctx.Selected(); cmd != nil {
		node = cmd
		fmt.Fprintln(w, "Usage: "+usageLine(cmd))
		var globals []string
		for _, f := range kctx.Model.Flags {
			if !f.Hidden {
				f.Hidden = true
				defer func() { f.Hidden = false }()
				globals = append(globals, flagName(f))
			}
		}
		if err := kong.DefaultHelpPrinter(options, kctx); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nGlobal flags, explained by fencerun --help:\n  %s\n", strings.Join(globals, ", "))
	} else {
		fmt.Fprintln(w, "Usage: fencerun [global flags] COMMAND [ARG...]")
		if err := kong.DefaultHelpPrinter(options, kctx); err != nil {
			return err
		}
	}
	if ex := examplesOf(node); ex != "" {
		fmt.Fprintf(w, "\nExamples:\n%s", ex)
	}
	return nil
}

func flagName(f *kong.Flag) string {
	if f.Short != 0 {
		return fmt.Sprintf("-%c/--%s", f.Short, f.Name)
	}
	return "--" + f.Name
}

// HelpCmd is `fencerun help [COMMAND]`.
type HelpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to explain; none for fencerun itself."`
}

// Run prints the help, as COMMAND --help would.
func (h *HelpCmd) Run(k *kong.Kong) error {
	if _, err := k.Parse(append(slices.Clone(h.Command), "--help")); err != nil {
		return usage("help %s: %v", strings.Join(h.Command, " "), err)
	}
	return nil
}

// version is set at build time: -ldflags "-X github.com/fencerun/fencerun/cmd/internal/cli.version=v1.2.3".
var version = "devel"

// versionFlag is --version and -V: what `fencerun version` prints.
type versionFlag bool

// BeforeReset prints the version and ends the parse, as --help does.
func (versionFlag) BeforeReset(kctx *kong.Context) error {
	writeVersion(kctx.Stdout)
	kctx.Kong.Exit(0)
	return nil
}

// VersionCmd is `fencerun version`.
type VersionCmd struct{}

// Run prints the version, the Go version and the VCS revision.
func (VersionCmd) Run() error {
	writeVersion(os.Stdout)
	return nil
}

func writeVersion(w io.Writer) {
	rev, modified := "unknown (built without VCS stamping)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(w, "fencerun %s\ngo %s %s/%s\nrevision %s%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH, rev, modified)
}
