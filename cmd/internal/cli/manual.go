package cli

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
	mangokong "github.com/alecthomas/mango-kong"
	"github.com/muesli/roff"
)

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
	man.WithSection("Exit status", manExitStatus).WithSection("Environment", manEnvironment).WithSection("Notes", manNotes)
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

const manEnvironment = `Every flag has a variable, FENCERUN_ and the flag's name in upper snake case (FENCERUN_TTL for --ttl), except --force, which must be typed; cancel --wait is FENCERUN_CANCEL_WAIT. Flags typed on the command line win over variables; a variable set but empty is a value, and an invalid one exits 125 naming it. With --etcd, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER, ETCDCTL_PASSWORD and ETCDCTL_DIAL_TIMEOUT fill what the FENCERUN_ variables leave unset; only --etcd or FENCERUN_ETCD select etcd.
The command gets FENCERUN_KEY (a keyed lease) or FENCERUN_RESIDENT (the absolute path of the store file), FENCERUN_FENCE (its fencing token: a decimal integer greater than every token handed out before for the same key or store) and FENCERUN_TICK (what fencerun tick needs to reach the holder; opaque); with --once or --once-per, FENCERUN_ONCE (the ID being run). On etcd it also gets ETCD_LOCK_KEY and ETCD_LOCK_REV as etcdctl lock gives them (FENCERUN_FENCE is the holder key's create revision) and ETCDCTL_ENDPOINTS, with ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY where fencerun was given them, never a password, so etcdctl in the command reaches the same cluster. Inherited values of these variables are replaced, so a fencerun nested in another's command describes its own lease.
The command inherits fencerun's environment, working directory and descriptors: 0, 1 and 2 untouched (never piped), and every descriptor from 3 on that the caller passed open, at the same number; fencerun's own descriptors never reach it. Under systemd socket activation (LISTEN_PID naming fencerun) the command gets the sockets, LISTEN_FDS, LISTEN_FDNAMES and a LISTEN_PID that names the command itself.`

const manNotes = `What the Go runtime hides from fencerun, and so from the command: a descriptor 0, 1 or 2 the caller closed reaches the command as /dev/null (the runtime reopens closed standard descriptors before main). Of the signals the caller ignored, only SIGHUP and SIGINT are seen (os/signal.Ignored): those stay ignored for the command and are not forwarded; SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT ignored by the caller stay ignored too; every other ignored signal (SIGPIPE, SIGTERM, SIGQUIT among them) reaches the command at its default. The signal mask reaches the command less the signals the runtime unblocks on every thread (go.dev/issue/21078): SIGHUP, SIGINT, SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGTERM, SIGSTKFLT, SIGCHLD, SIGURG, SIGPROF and SIGSYS arrive unblocked. Recovering these would need code that runs before the Go runtime starts (cgo, or an assembly entry point), which a static build does not have.
The command runs in a process group of its own. Under a terminal, when fencerun is in the foreground, that group gets the terminal's foreground (Ctrl-C reaches it) and gives it back at the end; Ctrl-Z stops the command and then fencerun, and fg or bg continue both, after fencerun checked that it still holds the lease. Without a terminal fencerun never stops itself, and a signal forwarded to a stopped command is followed by SIGCONT.
A command found but not executable (a directory included) exits 126, as env(1) and timeout(1) give; the command is looked up in PATH once, before the wait for the lease.`
