// Package store defines the lease store that fencerun runs commands under,
// and the types every backend (the file backend, etcd) shares. Nothing in
// it is specific to one backend: no paths, flocks or pids leave a backend
// except as the descriptive Holder fields.
//
// A Store hands out Leases on keys. Every backend guarantees:
//
//   - S1: at most one Lease per key is held at a time, unless the claims
//     ask for more (M1, M2): at most Claim.Slots holders, each in a slot
//     of its own, or any number of shared holders and never an exclusive
//     one beside them (Kind);
//   - S4: every acquisition of a key gets a fencing token strictly greater
//     than every one handed out before for it, also after a revocation and
//     after a holder died;
//   - S5: a renewal or check of a revoked, released or taken-over lease
//     fails with ErrLost (Lease.Renew says what a renewal compares), and a
//     holder hears of a revocation or cancel request within a second,
//     through Lease.Changes, without polling;
//   - S10: waiters acquire in arrival order, and a dead waiter loses its
//     place;
//   - S2: a holder that died holding a lease passes its leftovers (what its
//     command's tree may still be running, and on which host) to the next
//     holder, as Lease.Predecessor, until one confirms them stopped;
//   - S3: a Lease reports the Term its acquisition and each renewal set,
//     read on the claim's Clock just before the write that set the expiry:
//     the lease cannot expire before Term.End. The keeper counts from it;
//   - O1, O3, O4: ReleaseDone marks an --once ID done only while the lease
//     is held, in one step with the release; a key keeps its last MaxDone;
//   - N2: a key keeps the history of its last MaxHistory holdings.
//
// The file backend adds what others do not promise: a holder that is alive
// but silent (stopped, swapped out) is never taken from, even past its
// expiry, because liveness is a kernel lock, not a clock. On etcd a holder
// silent for longer than its TTL has lost its lease (E4).
//
// It does not stop anything: a Lease that is lost only says so. Stopping
// the command before the lease can expire is the job of package fence, the
// lease keeper.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. Backends wrap them with %w and the path or key involved.
var (
	// ErrLost: the lease is no longer held by the caller: it was revoked
	// (release --force), released, or taken over. The fence is broken.
	ErrLost = errors.New("store: lease lost")
	// ErrCorrupt: a state file or record could not be parsed. Nothing was
	// overwritten; `release --force` clears it.
	ErrCorrupt = errors.New("store: corrupt state")
	// ErrUnsafe: the state root or a file in it is unsafe to use: writable by
	// another user, or a symlink where a file or directory was expected.
	ErrUnsafe = errors.New("store: unsafe state")
	// ErrInvalidKey: the key breaks one of the rules of ValidateKey.
	ErrInvalidKey = errors.New("store: invalid key")
	// ErrSlots: the claim's Slots (or kind) differs from those of the
	// key's holders or waiters (M1); the error names both.
	ErrSlots = errors.New("store: slots differ")
)

// Store is a lease store. Its methods are safe for concurrent use.
type Store interface {
	// Acquire takes the lease on key for claim.
	//
	// When the key is busy: with claim.Wait false, Acquire returns
	// (nil, holder, nil) at once, holder being who holds it (contention is
	// a result, not an error). With claim.Wait true, the caller joins the
	// key's queue and Acquire blocks until the lease is its turn, or ctx
	// ends; then it returns ctx's error (context.Cause), and leaves no queue
	// entry behind.
	Acquire(ctx context.Context, key string, claim Claim) (Lease, *Holder, error)

	// Status reads one key. It never writes, and its cost does not grow
	// with the number of keys.
	Status(ctx context.Context, key string) (*Status, error)

	// List reads every key the store has, sorted by key. A key whose state
	// cannot be read is listed with State Corrupt and Err set; it does not
	// fail the whole list.
	List(ctx context.Context) ([]Status, error)

	// Revoke breaks the lease of each holder of key that w picks (release
	// --force; M3: every holder, or one): the
	// holder's next check or renewal returns ErrLost, and it hears of it
	// through Changes. It also clears a corrupt record of key. In the file
	// backend the key is taken by the next waiter only once the revoked
	// holder has given the lease up or is known dead; on etcd a revoked
	// lease frees the key at once, and the revoked holder's leftovers (its
	// tree, still being stopped) are the next holder's Predecessor. Revoke
	// reports whether there was a holder (or corrupt state) to revoke.
	Revoke(ctx context.Context, key string, w Which) (bool, error)

	// Cancel asks each holder of key that w picks to stop its command
	// gracefully and release. It reports whether there was a holder to ask.
	Cancel(ctx context.Context, key string, w Which) (bool, error)

	// Prune removes expired records of dead holders, dead waiters' queue
	// entries, stray temporary files and the sockets of dead runs, and
	// says what it removed. It never removes the state of a live holder or
	// waiter, nor a live run's socket.
	Prune(ctx context.Context) ([]Pruned, error)

	// Done is the IDs that runs under key completed (--once, O1), newest
	// first: at most MaxDone, each with the fence, holder and time of the
	// run that did it. A key that has none, or no state at all, has an
	// empty list. It never writes.
	Done(ctx context.Context, key string) ([]Done, error)

	// Reopen forgets that id was done under key (once-reset), so that the
	// next run for it runs again. It reports whether id was done. Done
	// IDs that cannot be read (ErrCorrupt) are all cleared: none of them
	// can be trusted, and a key whose list fails closed runs no --once
	// run until then.
	Reopen(ctx context.Context, key, id string) (bool, error)

	// AwaitDone blocks until id is among key's done IDs and returns its
	// mark, or until ctx ends (then ctx's cause): for a waiter whose ID
	// another run did meanwhile to give up at once (O1). It sleeps on an
	// event of the store's (no polling) and never writes.
	AwaitDone(ctx context.Context, key, id string) (*Done, error)

	// History is the key's last holdings (N2), oldest first: the newest
	// limit of them (0: all kept, at most MaxHistory), each with its
	// holder, start and end, and how it ended (as the holder said
	// through Lease.Ended, or revoked, or EndUnknown). Each holding is
	// written atomically (B5), so a crash loses at most the end of the
	// last one; Prune keeps the history.
	// A holding whose holder died before it wrote its end reads
	// EndUnknown once a later holding started; the current one has no
	// end. A key that has none, or no state at all, has an empty list. It
	// never writes.
	History(ctx context.Context, key string, limit int) ([]Holding, error)

	// ForgetHistory drops the history of key, which must be free (prune
	// --history): a held key keeps it, and is reported false.
	ForgetHistory(ctx context.Context, key string) (bool, error)

	// Close releases what the store holds open. It does not release leases.
	Close() error
}

// Claim says who asks for a lease and for how long.
type Claim struct {
	Name   string        // holder name shown by status
	Reason string        // shown by status
	TTL    time.Duration // lease duration; the keeper renews at TTL/3
	Wait   bool          // join the queue when busy, instead of returning at once
	// Marker is an opaque string that this run gives its command's process
	// tree (an environment entry). It is recorded with the lease so that the
	// next holder can find and stop the leftovers of a holder that died
	// (see Lease.Predecessor).
	Marker string
	// Cgroup is the path of the cgroup (v2) the command will run in, or
	// empty: recorded with the lease, so that the next holder can stop a
	// dead holder's leftovers exactly.
	Cgroup string
	// Slots is how many holders the key may have at once (M1): each gets
	// a slot of its own, 0..Slots-1, the lowest free one. 0 and 1 are the
	// exclusive hold. Every holder and waiter of a key must ask for the
	// same Slots: Acquire fails with ErrSlots otherwise.
	Slots int
	// Shared asks for a shared hold (M2): any number of shared holders at
	// once, never beside an exclusive one. Not with Slots over 1.
	Shared bool
	// Clock is the monotonic clock the caller's keeper runs on; the backend
	// reads it just before the write that sets an expiry, for Term. Nil
	// means boottime.Now (CLOCK_BOOTTIME).
	Clock func() time.Duration
}

// Term is how long a lease is known valid: from Start, an instant on the
// claim's Clock read just before the write or request that set the expiry,
// for TTL. The lease cannot expire before Start+TTL.
type Term struct {
	Start time.Duration
	TTL   time.Duration
}

// End is the instant, on the claim's Clock, before which the lease cannot
// expire.
func (t Term) End() time.Duration { return t.Start + t.TTL }

// Lease is a held lease. Its methods are for one goroutine at a time (the
// keeper's), except Key, Fence, Env, Term, Changes, Predecessor,
// LeftoversStopped and SetCommand, which are safe from any.
type Lease interface {
	Key() string
	// Fence is the fencing token of this acquisition.
	Fence() uint64
	// Slot is the holder's slot, 0..Claim.Slots-1 (M1); 0 for an
	// exclusive hold, -1 for a shared one.
	Slot() int
	// Term is the term the acquisition set; the keeper starts from it.
	Term() Term
	// Env is what the command is given besides FENCERUN_*: for example
	// ETCD_LOCK_KEY and ETCD_LOCK_REV on etcd. Usually nil.
	Env() []string
	// Predecessor is the previous holder of the key when it died holding the
	// lease (its leftovers may still run and must be stopped before this
	// lease's command starts), else nil. Its Leftovers name every tree to
	// stop: the predecessor's, and those of earlier holders whose leftovers
	// no holder has yet confirmed gone.
	Predecessor() *Holder
	// LeftoversStopped records that the predecessor's leftovers on this
	// host are gone, so that no later holder looks for them; trees on
	// other hosts stay recorded, for a fencerun there (only it can stop
	// or count them). Until it is called, they are
	// kept with the lease (also through Release), and a holder that dies
	// while stopping them passes them on to the next. Safe to call beside
	// the keeper's calls.
	LeftoversStopped(ctx context.Context) error
	// SetCommand records the command's process group (its pid, shown by
	// status as command_pid) and the session its tree runs in when that
	// session is the holder's own, for the next holder to stop if this one
	// dies (see Leftover). A backend may write it with its next renewal
	// when the claim named a Cgroup (which finds the tree exactly), and
	// must write it before it returns otherwise. Safe to call beside the
	// keeper's calls.
	SetCommand(ctx context.Context, group, session ProcessID) error

	// Renew extends the lease, conditional on it still being the one
	// acquired. It returns the new Term, or an error wrapping ErrLost when
	// the lease was revoked, released or taken over.
	//
	// In the file backend the condition is a compare-and-swap on the
	// record's secret token and the version the previous write returned.
	// Where renewal is not a compare-and-swap (an etcd keep-alive extends
	// a lease whoever sends it), the version is the holder key's create
	// revision: a renewal is the keep-alive plus a compare that the key
	// still exists with it, so a deleted key or a revoked lease fails it.
	Renew(ctx context.Context) (Term, error)
	// Changes receives (coalesced, never closed) when the lease's record may
	// have been changed by someone else: a revocation, a cancel request. The
	// receiver then calls Check. Backends must deliver within a second of
	// the change, without busy polling.
	Changes() <-chan struct{}
	// Check reads the lease's record; it never writes, extends or changes
	// the lease: an error wrapping ErrLost if it is no longer held, else
	// what was asked of the holder.
	Check(ctx context.Context) (Request, error)
	// Tick records a liveness tick at t in the lease's record (shown by
	// status as last tick).
	Tick(ctx context.Context, t time.Time) error
	// Release gives the lease up: the record is cleared, the queue entry
	// removed and the next waiter served. Call it only after the command's
	// processes are gone. Releasing a lost lease returns nil.
	Release(ctx context.Context) error
	// ReleaseDone is Release that also marks id done for the key (O1),
	// in one step with the release and conditional on the lease still
	// being held, as a renewal is: a revoked, expired or taken-over lease
	// marks nothing and returns an error wrapping ErrLost (it is still
	// let go). Only a run whose command succeeded under the lease calls
	// it. The key keeps its last MaxDone marks; older ones are dropped.
	ReleaseDone(ctx context.Context, id string) error
	// Ended says how the holding ended, for the key's History: Release
	// writes it, in one step with the release. A holding whose end was
	// written already (a revoker's) keeps that one. Without it, Release
	// writes EndReleased. Safe from any goroutine.
	Ended(e Ending)
}

// Request is what someone asked of the holder of a lease.
type Request int

const (
	RequestNone     Request = iota
	RequestCancel           // `fencerun cancel`: stop gracefully, exit 77
	RequestHandover         // resident: a newer build asks for the role, exit 77
)

// State of a key or role as status shows it.
type State string

const (
	Held    State = "held"
	Expired State = "expired" // the holder is past its expiry (but may still be alive)
	Free    State = "free"
	Corrupt State = "corrupt"
	Stuck   State = "stuck" // resident: ticked once, then silent for --stuck-after
)

// Holder describes who holds (or waits for) a lease. It never carries the
// lease's secret token.
type Holder struct {
	// Kind is how it holds or waits (M2, M1): exclusive, shared, or in a
	// slot of Slots.
	Kind       Kind      `json:"kind"`
	Slot       *int      `json:"slot,omitempty"`  // a holder's slot, with Kind KindSlot
	Slots      int       `json:"slots,omitempty"` // with Kind KindSlot
	Name       string    `json:"name"`
	PID        int       `json:"pid"`
	Host       string    `json:"host"`
	Reason     string    `json:"reason,omitempty"`
	Acquired   time.Time `json:"acquired"`
	Expires    time.Time `json:"expires,omitzero"`
	Fence      uint64    `json:"fence,omitempty"`
	LastTick   time.Time `json:"last_tick,omitzero"`
	Build      *Build    `json:"build,omitempty"`
	CommandPID int       `json:"command_pid,omitempty"`
	Cancel     bool      `json:"cancel_requested,omitempty"`
	// Cgroup is the holder's command's cgroup, where it has one.
	Cgroup string `json:"cgroup,omitempty"`
	// Processes is how many processes the holder's cgroup holds: filled
	// by the caller that can count them on the holder's host (status), not
	// by backends.
	Processes int `json:"processes,omitempty"`
	// Marker identifies the holder's command tree; see Claim.Marker. Not
	// shown by status.
	Marker string `json:"-"`
	// Leftovers, on a Predecessor, are every tree that may still run: its
	// own and those of earlier dead holders not yet confirmed gone.
	Leftovers []Leftover `json:"-"`
	// Foreign: the holder is not fencerun (etcdctl lock, another
	// concurrency.Mutex). It does not watch its lease: a revocation
	// stops nothing of its command.
	Foreign bool `json:"-"`
}

// Leftover is a command tree that a dead holder may have left running, and
// how to find it on its host: exactly by its cgroup where it had one;
// otherwise every process carrying Marker in its environment, in Group or
// in Session, and their descendants. A process or group id is only taken
// for the recorded one when the start times agree (see ProcessID). Only a
// process on Host may act on a Leftover: no backend stops another host's
// processes.
type Leftover struct {
	HolderPID int       `json:"holder_pid"`
	Host      string    `json:"host"`
	Marker    string    `json:"marker,omitempty"`
	Cgroup    string    `json:"cgroup,omitempty"`
	Group     ProcessID `json:"group,omitzero"`
	Session   ProcessID `json:"session,omitzero"`
	// Shared, set by the backend that read the record (never stored),
	// says that someone other than the reader's uid and root may have
	// written it: a group store's member, any client of an etcd cluster.
	// Its Group and Session are then never acted on (see package
	// supervisor): they could name any process of the host.
	Shared bool `json:"-"`
}

// Names reports whether l names a tree to look for: a marker, a cgroup or
// a process group.
func (l Leftover) Names() bool { return l.Marker != "" || l.Cgroup != "" || l.Group.ID != 0 }

// PassOn is the leftovers a dead holder passes on to the next holder:
// those earlier holders left that it had not confirmed stopped, then its
// own trees (those that name something), each once. A backend keeps them
// with the new holder's lease until it confirms them stopped
// (Lease.LeftoversStopped), also through its release.
func PassOn(unconfirmed []Leftover, own ...Leftover) []Leftover {
	out := slices.Clone(unconfirmed)
	for _, l := range own {
		if l.Names() && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// PredecessorOf is the Predecessor a new holder is given: the dead holder
// with every tree still to stop, or nil when there is none. A dead holder
// whose PID is not known (nil, or a record that kept only its fence) takes
// the newest tree's holder and host, and a missing Marker its marker.
func PredecessorOf(dead *Holder, leftovers []Leftover) *Holder {
	if len(leftovers) == 0 {
		return nil
	}
	var p Holder
	if dead != nil {
		p = *dead
	}
	last := leftovers[len(leftovers)-1]
	if p.PID == 0 {
		p.PID, p.Host = last.HolderPID, last.Host
	}
	if p.Marker == "" {
		p.Marker = last.Marker
	}
	p.Leftovers = leftovers
	return &p
}

// ProcessID names a process, or the process group or session it leads, on
// its host: the id, and that process's start time (clock ticks since boot,
// as /proc/PID/stat gives it), so that an id reused later is never taken
// for it. The zero value names nothing.
type ProcessID struct {
	ID    int    `json:"id"`
	Start uint64 `json:"start"`
}

// Build identifies an executable (resident role, R4).
type Build struct {
	// Path is the program whose build this is: the absolute path of the
	// command's executable as found through PATH (symlinks not followed),
	// or of --build. Only builds of one Path compare (R4).
	Path     string    `json:"path,omitempty"`
	ModTime  time.Time `json:"mod_time"`
	Size     int64     `json:"size"`
	Revision string    `json:"revision,omitempty"`
}

// Status is one key's (or one store's resident role's) state.
type Status struct {
	Key   string `json:"key,omitempty"`
	Store string `json:"store,omitempty"`
	State State  `json:"state"`
	// Holder is the holder of an exclusive hold; nil for shared holds and
	// slots, which Holders lists (M3).
	Holder *Holder `json:"holder"`
	// Holders is every holder, by slot (shared holders by fence).
	Holders []Holder `json:"holders"`
	Waiters []Holder `json:"waiters"`
	// Leftovers are the trees dead holders may have left running, not yet
	// confirmed stopped (see Lease.Predecessor). Shown by status as a
	// count of the processes still there, which only the host can tell.
	Leftovers []Leftover `json:"-"`
	// Err says why State is Corrupt; shown as "error" in JSON.
	Err error `json:"-"`
}

// Pruned is one thing Prune removed.
type Pruned struct {
	Key  string `json:"key,omitempty"`
	What string `json:"what"` // "expired lease", "dead waiter", "temp file", "free key", "stale socket", "leftovers", "dead waiter's record" (etcd)
	Path string `json:"path,omitempty"`
	// HolderPID and Count: for "leftovers", the dead holder and how many
	// of its processes were stopped.
	HolderPID int `json:"holder_pid,omitempty"`
	Count     int `json:"count,omitempty"`
}

// Holding is one holding of a key, as History keeps it (N2). The holder
// is described as status describes it, never with its token.
type Holding struct {
	Fence  uint64 `json:"fence"`
	Slot   *int   `json:"slot,omitempty"` // with --slots (M1); nil for an exclusive hold
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	Host   string `json:"host"`
	Reason string `json:"reason,omitempty"`
	// Start is when the lease was taken; End when the holding ended, zero
	// while it lasts or when its holder died without saying.
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
	Ending *Ending   `json:"ending,omitempty"` // nil while it lasts
}

// Ending is how a holding ended.
type Ending struct {
	How EndKind `json:"how"`
	// ExitStatus is the command's own exit status (EndExited).
	ExitStatus *int `json:"exit_status,omitempty"`
	// Signal is the signal that ended the command (EndSignal) or fencerun
	// (EndKilled), by name.
	Signal string `json:"signal,omitempty"`
	// By says who revoked it (EndRevoked): pid, user and host.
	By string `json:"by,omitempty"`
}

// EndKind is how a holding ended, in words.
type EndKind string

const (
	EndExited     EndKind = "exited"      // the command exited by itself
	EndSignal     EndKind = "signal"      // the command died of a signal
	EndLost       EndKind = "lost"        // the lease was lost (not renewed in time, taken over)
	EndRevoked    EndKind = "revoked"     // release --force
	EndCancelled  EndKind = "cancelled"   // fencerun cancel
	EndTimeout    EndKind = "timeout"     // --timeout ran out
	EndHandedOver EndKind = "handed over" // a newer build took the resident role
	EndStuck      EndKind = "stuck"       // --stuck-after
	EndKilled     EndKind = "killed"      // fencerun got a fatal signal and stopped the command
	EndNotStarted EndKind = "not started" // the command could not be started, or a signal came first
	EndFailed     EndKind = "failed"      // fencerun itself failed
	EndReleased   EndKind = "released"    // released without saying how (a caller that did not call Ended)
	EndUnknown    EndKind = "unknown (holder died)"
)

// MaxHistory is how many holdings of a key History keeps: the newest.
const MaxHistory = 1000

// Bounded is h with its text cut as status bounds it (MaxTextLen), so
// that a history stays a bounded file or etcd value.
func (h Holding) Bounded() Holding {
	h.Name, h.Reason, h.Host = clip(h.Name), clip(h.Reason), clip(h.Host)
	return h
}

// Finished is holdings with the holding of fence ended at end as e says,
// unless its end was written already; it reports whether it changed
// anything.
func Finished(holdings []Holding, fence uint64, end time.Time, e Ending) bool {
	for i := len(holdings) - 1; i >= 0; i-- {
		if holdings[i].Fence == fence {
			if holdings[i].Ending != nil {
				return false
			}
			holdings[i].End, holdings[i].Ending = end, &e
			return true
		}
	}
	return false
}

// clip cuts text kept in a history to a bound (1 KiB, as --name and
// --reason are bounded), at a UTF-8 boundary.
func clip(s string) string {
	if len(s) <= MaxTextLen {
		return s
	}
	return strings.ToValidUTF8(s[:MaxTextLen], "")
}

// Done is one ID a run completed under a key (O1): who ran it, with which
// fence, and when it ended.
type Done struct {
	ID    string    `json:"id"`
	Fence uint64    `json:"fence"`
	Name  string    `json:"name"`
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	At    time.Time `json:"at"`
}

// MaxDone is how many done IDs a key keeps (O3): the newest.
const MaxDone = 1000

// MaxIDLen bounds an ID (--once), and maxDoneName the holder name kept with
// a done ID: a key's done IDs stay a bounded file or etcd value.
const (
	MaxIDLen    = 128
	maxDoneName = 100
)

// ValidateID checks an --once ID: 1 to MaxIDLen bytes of UTF-8 without
// control characters or backslashes, so that log lines and status print
// it as it is.
func ValidateID(id string) error {
	switch {
	case id == "":
		return errors.New("the --once ID is empty")
	case len(id) > MaxIDLen:
		return fmt.Errorf("the --once ID is %d bytes, over the limit of %d", len(id), MaxIDLen)
	case Printable(id) != id:
		return fmt.Errorf("the --once ID %s holds a control character, a backslash or bytes that are not UTF-8", Printable(id))
	}
	return nil
}

// MarkDone is done with d added as the newest (first), any earlier mark
// of the same ID dropped, and the list cut to MaxDone: what every
// backend writes at ReleaseDone. The holder name is cut to a bound.
func MarkDone(done []Done, d Done) []Done {
	if len(d.Name) > maxDoneName {
		d.Name = strings.ToValidUTF8(d.Name[:maxDoneName], "")
	}
	out := make([]Done, 0, min(len(done)+1, MaxDone))
	out = append(out, d)
	for _, e := range done {
		if len(out) == MaxDone {
			break
		}
		if e.ID != d.ID {
			out = append(out, e)
		}
	}
	return out
}

// FindDone is the mark of id in done, or nil.
func FindDone(done []Done, id string) *Done {
	for i := range done {
		if done[i].ID == id {
			return &done[i]
		}
	}
	return nil
}

// ReopenDone is done without id, and whether id was in it (O3's reset).
func ReopenDone(done []Done, id string) ([]Done, bool) {
	if FindDone(done, id) == nil {
		return done, false
	}
	var kept []Done
	for _, d := range done {
		if d.ID != id {
			kept = append(kept, d)
		}
	}
	return kept, true
}

// Key rules (B1).
const MaxKeyLen = 80

// ValidateKey checks a key against the rules of CONTRACT.md B1 and returns an
// error wrapping ErrInvalidKey that names the rule broken.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case !ascii(key):
		return fmt.Errorf("%w: key %q is not ASCII: keys are ASCII letters, digits and . _ - : /", ErrInvalidKey, key)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key %q is %d bytes, over the limit of %d", ErrInvalidKey, key, len(key), MaxKeyLen)
	case !isAlnum(key[0]):
		return fmt.Errorf("%w: key %q must start with a letter or digit", ErrInvalidKey, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' && c != ':' && c != '/' {
			return fmt.Errorf("%w: key %q has %q at byte %d; keys may hold only letters, digits and . _ - : /", ErrInvalidKey, key, c, i)
		}
	}
	return nil
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Kind is how a holder holds a key, or a waiter waits for it.
type Kind string

const (
	KindExclusive Kind = "exclusive" // alone (the default, and --slots 1)
	KindShared    Kind = "shared"    // beside other shared holders (M2)
	KindSlot      Kind = "slot"      // in one of Slots slots (M1)
)

// HoldKind is h's kind, exclusive where none was recorded (a record from
// before M1, a resident) and for a holder that is not fencerun's.
func (h Holder) HoldKind() Kind {
	if h.Kind == "" || h.Foreign {
		return KindExclusive
	}
	return h.Kind
}

// MaxSlots bounds Claim.Slots (M1), and the shared holders of a key.
const MaxSlots = 1024

// KindOf is the kind a claim asks for, and its slot count (1 unless
// KindSlot).
func KindOf(c Claim) (Kind, int) {
	switch {
	case c.Shared:
		return KindShared, 1
	case c.Slots > 1:
		return KindSlot, c.Slots
	}
	return KindExclusive, 1
}

// ValidateClaimKind checks a claim's Slots and Shared (M1, M2).
func ValidateClaimKind(c Claim) error {
	switch {
	case c.Slots < 0 || c.Slots > MaxSlots:
		return fmt.Errorf("--slots %d is out of range: 1 to %d", c.Slots, MaxSlots)
	case c.Shared && c.Slots > 1:
		return errors.New("--shared and --slots cannot be combined")
	}
	return nil
}

// SameKind checks that a claim of kind k and n slots may wait beside a
// holder or waiter h of the same key: a slot claim only beside slot
// holders of as many slots; an exclusive or shared claim only beside
// exclusive and shared ones. A foreign holder (etcdctl lock) is exclusive.
// role is "holder" or "waiter". The error wraps ErrSlots and names both.
func SameKind(k Kind, n int, h Holder, role string) error {
	hk, hn := h.HoldKind(), h.Slots
	if hk != KindSlot {
		hn = 1
	}
	if (k == KindSlot) == (hk == KindSlot) && (k != KindSlot || n == hn) {
		return nil
	}
	return fmt.Errorf("%w: the key's %s (pid %d) has %s; this run asks for %s", ErrSlots, role, h.PID, describeKind(hk, hn), describeKind(k, n))
}

func describeKind(k Kind, n int) string {
	if k == KindSlot {
		return fmt.Sprintf("--slots %d", n)
	}
	if k == KindShared {
		return "a shared hold"
	}
	return "an exclusive hold"
}

// Which picks holders of a key, for Revoke and Cancel (M3): the zero value
// picks every holder; Slot the one in that slot (slot 0 an exclusive
// holder too: its Lease.Slot, and under --slots 1 its FENCERUN_SLOT, is
// 0; a shared holder has none); PID the one whose fencerun has that pid.
type Which struct {
	Slot *int
	PID  int
}

// Picks reports whether w picks h.
func (w Which) Picks(h *Holder) bool {
	if w.Slot != nil && slotOf(h) != *w.Slot {
		return false
	}
	return w.PID == 0 || h.PID == w.PID
}

// slotOf is the slot Which.Slot picks h by: its slot, 0 for an exclusive
// holder (etcdctl's too), -1 for a shared one.
func slotOf(h *Holder) int {
	switch {
	case h.Slot != nil:
		return *h.Slot
	case h.Kind == KindShared:
		return -1
	}
	return 0
}

// All reports whether w picks every holder.
func (w Which) All() bool { return w.Slot == nil && w.PID == 0 }
