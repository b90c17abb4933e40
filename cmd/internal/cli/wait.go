package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/internal/logfield"
	"github.com/fencerun/fencerun/store"
)

// waitReport tells what a wait for the lease is waiting for, while the
// store's Acquire blocks. A waiter does nothing while it waits (P8): the
// report reads the key's status only when something asks for it: once,
// after firstLook, for the info line "waiting for the lease" (holder,
// position) when info is logged; every redraw while a line is drawn on a
// terminal (holder, how long it has held, position, time left), cleared
// when the wait ends; once for an interruption's message (interruptible)
// and once for the holder a wait that ran out names (gaveUpOn). Without
// a terminal and below info, no goroutine runs and nothing is read until
// the wait ends. It reads the status from outside, so that the store's
// contract knows nothing of it.
type waitReport struct {
	what   string                                       // "deploy:staging", "the resident role of /srv/app/app.db"
	status func(context.Context) (*store.Status, error) // the key's or role's
	limit  duration.Wait
	log    hclog.Logger
	logged bool     // log the queued line (residents log their own)
	term   *os.File // the terminal to draw the line on, or nil
	// notify, if not nil, is told the line (without "fencerun: ") at each
	// look: the unit's STATUS under systemd (N1), looked at every
	// notifyLook.
	notify func(line string)

	start  time.Time
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc // ends a read in flight (end)

	mu   sync.Mutex
	busy string // who held it when last seen, for a wait that ran out
}

// firstLook is how long an acquisition may take before it counts as a
// wait; the terminal's line is redrawn every redraw.
const (
	firstLook  = 100 * time.Millisecond
	redraw     = 250 * time.Millisecond
	notifyLook = 5 * time.Second
)

// waitState is what a wait is waiting for, as one status read finds it:
// the line on a terminal, the interruption's message and a service
// manager's status are made of it.
type waitState struct {
	Holder   *store.Holder  // the exclusive holder, or nil
	Holders  []store.Holder // every holder (M3); none: not held (a handoff in progress)
	Position int            // 1 is next; 0: this process is not in the queue
	Waiters  int            // in the queue
	Left     time.Duration  // until --wait ends; negative: forever
}

// State reads what the wait is waiting for now, on demand.
func (w *waitReport) State(ctx context.Context) (waitState, error) {
	st, err := w.status(ctx)
	if err != nil {
		return waitState{}, err
	}
	s := waitState{Holder: st.Holder, Holders: holdersOf(*st), Waiters: len(st.Waiters), Left: -1}
	pid, host := os.Getpid(), hostname()
	for i, q := range st.Waiters {
		if q.PID == pid && (q.Host == "" || q.Host == host) {
			s.Position = i + 1
		}
	}
	if !w.limit.Forever() {
		s.Left = max(0, w.limit.Limit()-time.Since(w.start))
	}
	w.mu.Lock()
	w.busy = busyWith(st)
	w.mu.Unlock()
	return s, nil
}

// String says who is in the way and where this process is in the queue:
// "held by nightly (pid 12 on web1, reason: report 7) for 3s; position 1
// of 2 in the queue".
func (s waitState) String() string {
	var in strings.Builder
	if h := s.Holder; h != nil {
		var reason []string
		if h.Reason != "" {
			reason = append(reason, "reason: "+store.Printable(h.Reason))
		}
		in.WriteString("held by " + who(h, reason...))
		if !h.Acquired.IsZero() {
			fmt.Fprintf(&in, " for %s", max(0, time.Since(h.Acquired)).Round(time.Second))
		}
	} else if len(s.Holders) > 0 {
		in.WriteString(heldByMany(s.Holders))
	} else {
		in.WriteString("not held yet")
	}
	if s.Position > 0 {
		fmt.Fprintf(&in, "; position %d of %d in the queue", s.Position, s.Waiters)
	}
	return in.String()
}

// startWaitReport starts what the report does while the wait lasts (w.start
// is when the wait began): nothing at all unless it logs the queued line
// or draws on a terminal. end stops it.
func startWaitReport(w *waitReport) *waitReport {
	if w.term == nil && w.notify == nil && !(w.logged && w.log.IsInfo()) {
		return w
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	var ctx context.Context
	ctx, w.cancel = context.WithCancel(context.Background())
	go w.run(ctx)
	return w
}

func (w *waitReport) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTimer(firstLook)
	defer t.Stop()
	drawn, logged, pause := false, !w.logged, firstLook
	for {
		select {
		case <-w.stop:
			if drawn {
				fmt.Fprint(w.term, "\r\x1b[K")
			}
			return
		case <-t.C:
		}
		s, err := w.State(ctx)
		if err == nil && !logged && s.Position > 0 {
			logged = true
			w.logQueued(s)
		}
		if err == nil && w.notify != nil {
			w.notify(strings.TrimPrefix(w.line(s), "fencerun: "))
		}
		if w.term == nil {
			// Not in the queue yet (a stuck guard, a handoff): look a few
			// more times, ever later, and then no more, but every
			// notifyLook for a service manager's status.
			switch pause *= 2; {
			case w.notify != nil:
				t.Reset(min(pause, notifyLook))
			case logged || pause > 8*firstLook:
				return
			default:
				t.Reset(pause)
			}
			continue
		}
		if err == nil {
			fmt.Fprint(w.term, "\r"+fitTerminal(w.term, w.line(s))+"\x1b[K")
			drawn = true
		}
		t.Reset(redraw)
	}
}

// logQueued logs the info line of a wait, once this process is queued.
func (w *waitReport) logQueued(s waitState) {
	args := []any{"position", s.Position, "waiters", s.Waiters}
	if h := s.Holder; h != nil {
		args = append(args, "holder", store.Printable(h.Name), "holder_pid", h.PID, "holder_host", store.Printable(h.Host))
	} else if len(s.Holders) > 0 {
		args = append(args, "holders", holdersCount(s.Holders))
	}
	w.log.Info("waiting for the lease", args...)
}

// line is the terminal's line for s.
func (w *waitReport) line(s waitState) string {
	line := "fencerun: waiting for " + w.what + ": " + s.String()
	if s.Left >= 0 {
		line += fmt.Sprintf("; %s left", s.Left.Round(time.Second))
	}
	return line
}

// end stops the report and clears the line. A read in flight is not
// waited for: it may be waiting a second for a stuck guard (filestore).
func (w *waitReport) end() {
	if w.stop == nil {
		return
	}
	close(w.stop)
	w.cancel()
	<-w.done
}

// lastBusy says who held it when the report last read (busyWith), or
// that another process does, if it never read.
func (w *waitReport) lastBusy() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return orDefault(w.busy, describe(nil))
}

// closingLook bounds the status read that names the holder once a wait
// ran out (gaveUpOn) or was interrupted: --wait ends at its limit, and a
// read that would wait for a stuck guard (a second in filestore) is not
// waited out again.
const closingLook = 250 * time.Millisecond

// gaveUpOn names who holds it once a wait ran out: as a status read now
// finds it, or, when that read does not answer within closingLook, as
// the report last saw it.
func (w *waitReport) gaveUpOn() string {
	ctx, cancel := context.WithTimeout(context.Background(), closingLook)
	defer cancel()
	_, _ = w.State(ctx) // a read that answers updates what lastBusy says
	return w.lastBusy()
}

// interruptible returns the context to wait under: ctx, except that when
// ctx ends (a signal) the report first reads, once, what the wait was
// waiting for, while this process is still in the queue, and keeps it in
// *waitedFor for the interruption's message. done waits for that read,
// if it began, and must be called before *waitedFor is used.
func (w *waitReport) interruptible(ctx context.Context, waitedFor *string) (wctx context.Context, done func()) {
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	read := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(read)
		rctx, end := context.WithTimeout(context.Background(), closingLook)
		defer end()
		if s, err := w.State(rctx); err == nil && (s.Position > 0 || s.Holder != nil) {
			*waitedFor = s.String()
		}
		cancel(context.Cause(ctx))
	})
	return wctx, func() {
		if !stop() {
			<-read
		}
		cancel(nil)
	}
}

// waited is how long the wait took.
func (w *waitReport) waited() string { return logfield.Duration(time.Since(w.start)) }

// fitTerminal cuts line to the terminal's width: a line that wraps cannot
// be rewritten in place.
func fitTerminal(f *os.File, line string) string {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return line
	}
	if r := []rune(line); len(r) >= int(ws.Col) {
		return string(r[:int(ws.Col)-1])
	}
	return line
}

// stderrTerminal is stderr when it is a terminal that the waiting line may
// draw on: not with JSON logs (every line there is JSON) nor with -q.
func stderrTerminal(g *Globals) *os.File {
	if g.Quiet || g.LogFormat == "json" {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return os.Stderr
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// statusOf reads a key's status for a waitReport.
func statusOf(st store.Store, key string) func(context.Context) (*store.Status, error) {
	return func(ctx context.Context) (*store.Status, error) { return st.Status(ctx, key) }
}
