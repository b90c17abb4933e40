package cli

// Shell completion and the manual page, both made from the kong model
// that --help shows, by libraries built for kong: completions by
// github.com/jotaen/kong-completion (on github.com/posener/complete), the
// manual page by github.com/alecthomas/mango-kong (on
// github.com/muesli/mango). Neither costs a run anything: the completion
// model is built only when the shell asks (COMP_LINE set), the manual page
// only by `fencerun man`.

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	mangokong "github.com/alecthomas/mango-kong"
	"github.com/hashicorp/go-hclog"
	kongcompletion "github.com/jotaen/kong-completion"
	"github.com/muesli/roff"
	"github.com/posener/complete"
)

// CompletionCmd is `fencerun completion bash|zsh|fish`.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// Help explains how the script works.
func (CompletionCmd) Help() string {
	return `Prints a script that makes SHELL complete fencerun's commands, flags and flag values and, for status, release, cancel, list and run --key, the keys that exist in the state root (--dir, FENCERUN_DIR or the default). The script asks this fencerun binary, by its absolute path, for each completion: print it again after moving the binary.`
}

// Usage of completion.
func (CompletionCmd) Usage() string { return "completion bash|zsh|fish" }

// Examples of completion.
func (CompletionCmd) Examples() string {
	return `  # for this shell session
  source <(fencerun completion bash)
  # for every session
  fencerun completion bash > /etc/bash_completion.d/fencerun
  fencerun completion zsh >> ~/.zshrc
  fencerun completion fish > ~/.config/fish/completions/fencerun.fish
`
}

// Run prints the script for the shell.
func (c *CompletionCmd) Run(kctx *kong.Context) error {
	if err := (&kongcompletion.Completion{Shell: c.Shell, Code: true}).Run(kctx); err != nil {
		return err
	}
	if c.Shell == "bash" {
		// Bash splits words at colons by default, so deploy:st would
		// complete to deploy:deploy:staging (as npm's script, drop it).
		fmt.Fprintln(kctx.Stdout, "# keys hold colons (deploy:staging): complete them as one word\nCOMP_WORDBREAKS=${COMP_WORDBREAKS//:}")
	}
	return nil
}

// answerCompletion answers the shell's completion request in COMP_LINE and
// returns the exit code.
func answerCompletion(k *kong.Kong, o logOptions) int {
	code := exitFailed
	kongcompletion.Register(k,
		kongcompletion.WithPredictor("key", complete.PredictFunc(existingKeys)),
		kongcompletion.WithExitFunc(func(c int) { code = c }),
		kongcompletion.WithErrorHandler(func(err error) { newLogger(o).Error("completion: " + err.Error()) }),
	)
	return code
}

// existingKeys are the keys of the state root the command line names:
// nothing at all on any error, for a completion has no one to tell. The
// whole line is read for --dir: a predictor's Args start at its command.
func existingKeys(complete.Args) []string {
	g := Globals{Dir: os.Getenv("FENCERUN_DIR"), log: hclog.NewNullLogger()}
	words := strings.Fields(os.Getenv("COMP_LINE"))
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, "--dir="); ok {
			g.Dir = v
		} else if w == "--dir" && i+1 < len(words) {
			g.Dir = words[i+1]
		}
	}
	backend, err := g.openStore(false)
	if err != nil {
		return nil
	}
	defer backend.Close()
	all, err := backend.List(context.Background())
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(all))
	for _, st := range all {
		if st.Key != "" {
			keys = append(keys, st.Key)
		}
	}
	return keys
}

// ManCmd is `fencerun man`, hidden: the manual page in roff on stdout.
type ManCmd struct{}

// Run prints the manual page.
func (ManCmd) Run(k *kong.Kong) error {
	fmt.Print(manPage(k))
	return nil
}

// manPage is fencerun(1), from the kong model: mango-kong's page, with
// each command named by its usage line, and sections for exit codes, the
// environment and the examples of every command.
func manPage(k *kong.Kong) string {
	man := mangokong.NewManPage(1, k.Model).WithLongDescription(manDescription)
	byName := map[string]*kong.Node{}
	for _, n := range k.Model.Children {
		byName[n.Summary()] = n
	}
	commands := man.Root.Commands
	var synopsis []string
	for name, c := range commands {
		n := byName[name]
		if n == nil {
			continue
		}
		// Named by its usage line, then its summary and its long help as
		// paragraphs (mango-kong would glue the long help to the name).
		delete(commands, name)
		c.Name = strings.TrimPrefix(usageLine(n), "fencerun ")
		c.Usage, c.Short = "", strings.TrimSpace(n.Help+"\n"+regexp.MustCompile(`\n\s*\n`).ReplaceAllString(n.Detail, "\n"))
		commands[c.Name] = c
		synopsis = append(synopsis, roffLine(usageLine(n)))
	}
	sort.Strings(synopsis)
	man.WithSection("Exit status", manExitStatus).WithSection("Environment", manEnvironment)
	page := man.Build(roff.NewDocument())
	// The date mango stamps makes a page differ from day to day: the
	// page is a function of the model alone, so it has none.
	page = regexp.MustCompile(`(?m)^\.TH .*$`).ReplaceAllLiteralString(page, `.TH FENCERUN 1 "" "fencerun" "User Commands"`)
	// mango's synopsis is generic; fencerun's is the usage lines.
	page = regexp.MustCompile(`(?s)\.SH SYNOPSIS\n.*?\n\.SH `).ReplaceAllLiteralString(page,
		".SH SYNOPSIS\n.nf\nfencerun [global flags] COMMAND [ARG...]\n"+strings.Join(synopsis, "\n")+"\n.fi\n.SH ")
	return strings.TrimRight(page, "\n") + "\n" + manExamples(k)
}

// manExamples is the EXAMPLES section: every command's examples, as
// written (no filling).
func manExamples(k *kong.Kong) string {
	var b strings.Builder
	b.WriteString(".SH EXAMPLES\n")
	nodes := append([]*kong.Node{k.Model.Node}, k.Model.Children...)
	sort.SliceStable(nodes[1:], func(i, j int) bool { return nodes[1+i].Name < nodes[1+j].Name })
	for _, n := range nodes {
		ex := examplesOf(n)
		if ex == "" || n.Hidden {
			continue
		}
		if n != k.Model.Node {
			fmt.Fprintf(&b, ".SS %s\n", n.Name)
		}
		b.WriteString(".PP\n.nf\n.RS 4\n")
		for _, line := range strings.Split(strings.TrimRight(ex, "\n"), "\n") {
			b.WriteString(roffLine(strings.TrimPrefix(line, "  ")) + "\n")
		}
		b.WriteString(".RE\n.fi\n")
	}
	return b.String()
}

// roffLine escapes a line of text for roff: backslashes, and a leading
// dot or quote that would read as a request.
func roffLine(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

const manDescription = `fencerun runs a command only while it holds a lease, and stops the command's whole process tree the moment the lease is lost. It is for cron entries, deploy steps, single-instance workers and integration tests that must never run twice at once, even when a wrapper is SIGKILLed, paused, wedged or upgraded.
A keyed lease (--key) has waiters served in arrival order, a TTL renewed every TTL/3 and a fencing token per acquisition (FENCERUN_FENCE). The resident role of a store file (--resident) is held by a kernel lock beside it, with liveness ticks, a watchdog and handover to a newer build.
Durations are Go durations (90s, 1m30s) or bare seconds (5, 0.5), at most a year; waits also take forever.`

const manExitStatus = `The command's own code when it exited by itself, or 128+N when it died of signal N (or fencerun got signal N while waiting for the lease).
75: the lease was not acquired: busy with -n or -w 0, or --wait ran out (-E changes it); also cancel --wait when the holder did not let go in time.
76: the fence broke: the lease was revoked, taken over or not renewed in time, and the command was stopped.
77: stopped on request: cancelled, or handed over to a newer build.
78: stuck: the command stopped ticking for --stuck-after.
124: the command ran past --timeout.
125: fencerun itself failed: usage, invalid key, unusable or corrupt state.
126: the command was found but could not be executed. 127: the command was not found.`

const manEnvironment = `Every flag has a variable, FENCERUN_ and the flag's name in upper snake case (FENCERUN_TTL for --ttl), except --force, which must be typed; cancel --wait is FENCERUN_CANCEL_WAIT. Flags typed on the command line win over variables.
The command gets FENCERUN_KEY or FENCERUN_RESIDENT, FENCERUN_FENCE (its fencing token) and FENCERUN_TICK (for fencerun tick).`
