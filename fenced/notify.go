package fenced

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/fence"
	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/internal/errtext"
	"github.com/fencerun/fencerun/internal/sdnotify"
)

// Notify is how a run speaks systemd's notify protocol as the unit's main
// process (N1). The waiting STATUS lines are the caller's Acquire's to
// send; the run says the rest.
type Notify struct {
	// Send writes one message to the service manager, from this process
	// (sdnotify.Send to NOTIFY_SOCKET).
	Send func(state string) error
	// Relay, if not nil, is the command's own notify socket (--ready
	// command): READY=1 is the command's to say, and what it says is
	// relayed. Nil (--ready start): READY=1 once the command started.
	Relay Relay
	// Watchdog is how often the service manager wants WATCHDOG=1
	// (WATCHDOG_USEC), or 0.
	Watchdog time.Duration
}

// Relay is the command's own notify socket; *sdnotify.Listener is one.
type Relay interface {
	// Read returns the next datagram and the pid the kernel stamped on
	// it, until Close (then an error wrapping net.ErrClosed).
	Read() (sdnotify.Message, error)
	Close() error
}

// relayed are the assignments a command's datagram may pass on to the
// service manager: what a service says of itself. MAINPID is never among
// them (the unit's main process is fencerun, whatever the command says),
// nor anything that needs the descriptors a relay does not pass
// (FDSTORE, BARRIER: a barrier's pipe is closed once what came before it
// was relayed). MONOTONIC_USEC goes with RELOADING=1 (Type=notify-reload).
var relayed = []string{"READY=", "STATUS=", "RELOADING=", "STOPPING=", "WATCHDOG=",
	"EXTEND_TIMEOUT_USEC=", "MONOTONIC_USEC="}

// notifier is the notify protocol's actor: STATUS and READY once the
// command started, the watchdog fed while the lease is renewed, the
// command's own messages relayed from fencerun's pid, and STOPPING with
// the reason when fencerun stops the command. It goes on until the
// command's tree is gone: a stopping command may still say STOPPING=1.
type notifier struct {
	cfg    *Notify
	cmd    *command
	keeper *fence.Keeper
	clock  boottime.Clock
	log    hclog.Logger
	held   string      // the STATUS once held
	ended  chan string // what fencerun says when it stops the command
	done   chan struct{}
	failed bool // a send failed: said once, not at every watchdog feed
}

func newNotifier(cfg *Config, cmd *command, keeper *fence.Keeper, key string, fence uint64, log hclog.Logger) *notifier {
	return &notifier{cfg: cfg.Notify, cmd: cmd, keeper: keeper, clock: cfg.Clock, log: log,
		held:  fmt.Sprintf("STATUS=holding %s (fence %d)", key, fence),
		ended: make(chan string, 1), done: make(chan struct{})}
}

func (n *notifier) execute() error {
	select {
	case <-n.cmd.started:
	case <-n.done:
		return nil
	}
	msgs := make(chan sdnotify.Message)
	if n.cfg.Relay != nil {
		go n.read(msgs)
		n.send(n.held)
	} else {
		n.send(n.held + "\nREADY=1")
	}
	var feed boottime.Timer // nil: no watchdog of fencerun's own to feed
	if n.cfg.Watchdog > 0 && n.cfg.Relay == nil {
		var err error
		if feed, err = n.clock.NewTimer(); err != nil {
			return fmt.Errorf("fenced: watchdog timer: %w", err)
		}
		defer feed.Close()
		feed.Set(n.clock.Now())
	}
	stopping := false
	for {
		select {
		case m := <-msgs:
			if s := n.relay(m, stopping); s != "" {
				n.send(s)
			}
		case <-fired(feed):
			if n.renewed() {
				n.send("WATCHDOG=1")
			}
			feed.Set(n.clock.Now() + n.cfg.Watchdog/2) // as sd_watchdog_enabled(3) advises
		case s := <-n.ended:
			stopping = true
			n.send(s)
		case <-n.done:
			return nil
		}
	}
}

// fired is t's channel, or nil (never ready) without a timer.
func fired(t boottime.Timer) <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.C()
}

// interrupt says why the group ended, once: a keeper that loses the lease
// after another actor began the stop is not told again, as STOPPING=1 went
// already.
func (n *notifier) interrupt(err error) {
	if s := stopping(err); s != "" {
		select {
		case n.ended <- s:
		default:
		}
	}
	go func() {
		<-n.cmd.gone
		if n.cfg.Relay != nil {
			n.cfg.Relay.Close()
		}
		close(n.done)
	}()
}

// read passes the command's datagrams on until the relay is closed.
func (n *notifier) read(msgs chan<- sdnotify.Message) {
	for {
		m, err := n.cfg.Relay.Read()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			n.log.Warn("notify socket: read failed", "error", err)
			continue
		}
		select {
		case msgs <- m:
		case <-n.done:
			return
		}
	}
}

// relay is what of the command's datagram m goes on to the service
// manager: nothing from a process not of the command's tree, nor a READY
// or WATCHDOG once fencerun is stopping it, nor WATCHDOG=1 while the
// lease is not being renewed.
func (n *notifier) relay(m sdnotify.Message, stopping bool) string {
	if !n.cmd.owns(m.PID) {
		n.log.Debug("notify socket: a message from outside the command's tree was dropped", "pid", m.PID)
		return ""
	}
	var out []string
	for _, f := range m.Fields() {
		switch {
		case !hasPrefix(f, relayed):
		case stopping && (strings.HasPrefix(f, "READY=") || strings.HasPrefix(f, "WATCHDOG=")):
		case f == "WATCHDOG=1" && !n.renewed():
		default:
			out = append(out, f)
		}
	}
	return strings.Join(out, "\n")
}

// renewed says whether the lease is being renewed: the renewal due by now
// succeeded, or is late by less than half the watchdog's interval, so that a
// renewal's own round trip costs no feed, and renewals that stopped stop
// the feeding within an interval.
func (n *notifier) renewed() bool {
	t := n.keeper.Renewed()
	return n.clock.Now() < t.Start+t.TTL/3+n.cfg.Watchdog/2
}

func (n *notifier) send(state string) {
	if err := n.cfg.Send(state); err != nil && !n.failed {
		n.failed = true
		n.log.Warn("could not notify the service manager (said once)", "error", err)
	}
}

// stopping is what fencerun tells the service manager when the group ended
// with err, which stops the command: nothing when the command ended by
// itself.
func stopping(err error) string {
	var end *fence.EndError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &end) && end.Reason == fence.Lost:
		return "STATUS=lease lost: " + oneLine(errtext.Sentence(err)) + "; stopping the command\nSTOPPING=1"
	}
	return "STATUS=stopping the command: " + oneLine(errtext.Sentence(err)) + "\nSTOPPING=1"
}

// oneLine keeps a STATUS value on its line: a newline would start another
// assignment.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
