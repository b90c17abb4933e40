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
// store's Acquire blocks: an info line once this process is in the queue
// (holder, position), and, with stderr on a terminal, one line rewritten
// in place (holder, how long it has held, position, time left) that is
// cleared when the wait ends. It reads the key's status from outside, so
// that the store's contract knows nothing of it; an acquisition that is
// not kept waiting ends before its first read and costs nothing.
type waitReport struct {
	what   string                                       // "deploy:staging", "the resident role of /srv/app/app.db"
	status func(context.Context) (*store.Status, error) // the key's or role's
	limit  duration.Wait
	log    hclog.Logger
	logged bool     // log the queued line (residents log their own)
	term   *os.File // the terminal to draw the line on, or nil

	start  time.Time
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc // ends a read in flight (end)

	mu     sync.Mutex
	latest string        // the last thing seen in the way, for an interruption
	holder *store.Holder // the holder last seen, for a wait that ran out
}

// firstLook is how long an acquisition may take before it counts as a
// wait; the line is redrawn every redraw.
const (
	firstLook = 100 * time.Millisecond
	redraw    = 250 * time.Millisecond
	relook    = time.Second // without a terminal: only for an interruption's message
)

// startWaitReport starts reporting (w.start is when the wait began); end
// stops it.
func startWaitReport(w *waitReport) *waitReport {
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
	drawn := false
	for {
		select {
		case <-w.stop:
			if drawn {
				fmt.Fprint(w.term, "\r\x1b[K")
			}
			return
		case <-t.C:
		}
		st, err := w.status(ctx)
		if err == nil && st != nil {
			line := w.look(st)
			if w.term != nil && line != "" {
				fmt.Fprint(w.term, "\r"+fitTerminal(w.term, line)+"\x1b[K")
				drawn = true
			}
		}
		if w.term != nil {
			t.Reset(redraw)
		} else {
			t.Reset(relook)
		}
	}
}

// look reads st: who is in the way, and where this process is in the
// queue. It logs the queued line the first time it finds this process
// there, and returns the terminal's line.
func (w *waitReport) look(st *store.Status) string {
	pos, pid, host := 0, os.Getpid(), hostname()
	for i, q := range st.Waiters {
		if q.PID == pid && (q.Host == "" || q.Host == host) {
			pos = i + 1
		}
	}
	h := st.Holder
	var in strings.Builder
	if h != nil {
		var reason []string
		if h.Reason != "" {
			reason = append(reason, "reason: "+store.Printable(h.Reason))
		}
		in.WriteString("held by " + who(h, reason...))
		if !h.Acquired.IsZero() {
			fmt.Fprintf(&in, " for %s", max(0, time.Since(h.Acquired)).Round(time.Second))
		}
	} else {
		in.WriteString("not held yet")
	}
	if pos > 0 {
		fmt.Fprintf(&in, "; position %d of %d in the queue", pos, len(st.Waiters))
	}
	w.mu.Lock()
	first := w.latest == "" && pos > 0
	if pos > 0 || h != nil {
		w.latest = in.String()
	}
	w.holder = h
	w.mu.Unlock()
	if first && w.logged {
		args := []any{"position", pos, "waiters", len(st.Waiters)}
		if h != nil {
			args = append(args, "holder", store.Printable(h.Name), "holder_pid", h.PID, "holder_host", store.Printable(h.Host))
		}
		w.log.Info("waiting for the lease", args...)
	}
	line := "fencerun: waiting for " + w.what + ": " + in.String()
	if !w.limit.Forever() {
		left := max(0, w.limit.Limit()-time.Since(w.start)).Round(time.Second)
		line += fmt.Sprintf("; %s left", left)
	}
	return line
}

// end stops the report, clears the line, and returns what the wait was
// last seen waiting for ("" if it never was). A read in flight is not
// waited for: it may be waiting a second for a stuck guard (filestore).
func (w *waitReport) end() string {
	close(w.stop)
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// lastHolder is the holder the report last saw (nil if none, or if it
// never read).
func (w *waitReport) lastHolder() *store.Holder {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holder
}

// closingLook bounds the status read that names the holder once a wait
// ran out (gaveUpOn): --wait ends at its limit, and a read that would wait
// for a stuck guard (a second in filestore) is not waited out again.
const closingLook = 250 * time.Millisecond

// gaveUpOn is the holder to name once a wait ran out: as a status read
// now finds it, or, when that read does not answer within closingLook,
// as the report last saw it.
func (w *waitReport) gaveUpOn() *store.Holder {
	ctx, cancel := context.WithTimeout(context.Background(), closingLook)
	defer cancel()
	if st, err := w.status(ctx); err == nil && st != nil {
		return st.Holder
	}
	if w.stop == nil {
		return nil
	}
	return w.lastHolder()
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
