package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fencerun/fencerun/store"
)

// How status, list, release and cancel show a key's holders (M3): an
// exclusive hold as it always was (one holder, its fields one a line); a
// key held in slots (--slots N) or shared (--shared) as one line a
// holder, each with its slot or kind, pid, fence and age, and list's
// HOLDER column as a count ("3 of 4 slots", "2 shared").

// holdersOf is every holder of st: its Holders, or its Holder alone from
// a backend or role that fills only that one. Never nil: JSON's holders
// is always an array.
func holdersOf(st store.Status) []store.Holder {
	switch {
	case len(st.Holders) > 0:
		return st.Holders
	case st.Holder != nil:
		return []store.Holder{*st.Holder}
	}
	return []store.Holder{}
}

// held reports whether st has a holder of any kind.
func held(st store.Status) bool { return st.Holder != nil || len(st.Holders) > 0 }

// notAllExclusive reports whether st's holders or waiters are not all
// exclusive: then each waiter is shown with its kind.
func notAllExclusive(st store.Status) bool {
	for _, h := range holdersOf(st) {
		if h.HoldKind() != store.KindExclusive {
			return true
		}
	}
	for _, w := range st.Waiters {
		if w.HoldKind() != store.KindExclusive {
			return true
		}
	}
	return false
}

// holdersCount is list's HOLDER column for a key of many holders: "3 of 4
// slots", "2 shared", and both where a key changes kind while a revoked
// holder of the other kind still stops ("1 exclusive, 2 shared").
func holdersCount(hs []store.Holder) string {
	var slots, shared, excl, of int
	for _, h := range hs {
		switch h.HoldKind() {
		case store.KindSlot:
			slots, of = slots+1, max(of, h.Slots)
		case store.KindShared:
			shared++
		default:
			excl++
		}
	}
	var parts []string
	if excl > 0 {
		parts = append(parts, fmt.Sprintf("%d exclusive", excl))
	}
	if slots > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d slots", slots, of))
	}
	if shared > 0 {
		parts = append(parts, fmt.Sprintf("%d shared", shared))
	}
	return strings.Join(parts, ", ")
}

// place says where h holds: "slot 2", "shared", "exclusive".
func place(h store.Holder) string {
	if h.HoldKind() == store.KindSlot && h.Slot != nil {
		return "slot " + strconv.Itoa(*h.Slot)
	}
	return string(h.HoldKind())
}

// waitsFor says what a waiter waits for: "exclusive", "shared", "one of 4
// slots".
func waitsFor(w store.Holder) string {
	if w.HoldKind() == store.KindSlot {
		return fmt.Sprintf("one of %d slots", w.Slots)
	}
	return string(w.HoldKind())
}

// holderLine is one holder of many, for status: "slot 2: make (pid 12 on
// web1), fence 7, held for 3s, command pid 13, reason: nightly".
func holderLine(h store.Holder, now time.Time) string {
	var more []string
	if h.Fence != 0 {
		more = append(more, "fence "+strconv.FormatUint(h.Fence, 10))
	}
	if !h.Acquired.IsZero() {
		more = append(more, "held for "+max(0, now.Sub(h.Acquired)).Round(time.Second).String())
	}
	if !h.Expires.IsZero() && h.Expires.Before(now) {
		more = append(more, "expired "+relative(h.Expires, now))
	}
	if h.CommandPID != 0 {
		more = append(more, "command pid "+strconv.Itoa(h.CommandPID))
	}
	if h.Cgroup != "" {
		n := fmt.Sprintf("%d processes", h.Processes)
		if h.Processes == 1 {
			n = "1 process"
		}
		more = append(more, n+" in its cgroup")
	}
	if !h.LastTick.IsZero() {
		more = append(more, "last tick "+ago(h.LastTick, now))
	}
	if h.Cancel {
		more = append(more, "cancel requested")
	}
	if h.Reason != "" {
		more = append(more, "reason: "+store.Printable(h.Reason))
	}
	line := place(h) + ":\t" + who(&h)
	if len(more) > 0 {
		line += ", " + strings.Join(more, ", ")
	}
	return line
}

// printHolders writes the holders of a key held in slots or shared, for
// status: a count, then a line each.
func printHolders(w io.Writer, hs []store.Holder, now time.Time) {
	fmt.Fprintf(w, "holders:\t%s\n", holdersCount(hs))
	for _, h := range hs {
		fmt.Fprintf(w, "  %s\n", holderLine(h, now))
	}
}

// heldFor is how long the longest of hs has held, for list's HELD-FOR;
// "-" when none says when it took the key (an etcdctl lock).
func heldFor(hs []store.Holder, now time.Time) string {
	first := firstAcquired(hs)
	if first.IsZero() {
		return "-"
	}
	return now.Sub(first).Round(time.Second).String()
}

// firstAcquired is when the longest of hs took the key; zero when none
// says.
func firstAcquired(hs []store.Holder) time.Time {
	var first time.Time
	for _, h := range hs {
		if !h.Acquired.IsZero() && (first.IsZero() || h.Acquired.Before(first)) {
			first = h.Acquired
		}
	}
	return first
}

// named names one holder of a key for release and cancel: "make (pid 12
// on web1), fence 7, slot 2"; the slot or kind only for a hold that is
// not exclusive.
func named(h store.Holder) string {
	s := fmt.Sprintf("%s, fence %d", who(&h), h.Fence)
	if h.HoldKind() != store.KindExclusive {
		s += ", " + place(h)
	}
	return s
}

// busyWith says who holds the key st is of, for a wait that gave up:
// "held by nightly (pid 12 on web1, since ...)", or for many holders
// "held by 4 of 4 slots, the longest by nightly (pid 12 on web1) for 3m".
func busyWith(st *store.Status) string {
	if st.Holder != nil || len(st.Holders) == 0 {
		return describe(st.Holder)
	}
	return heldByMany(st.Holders)
}

// heldByMany names many holders by their count and the longest of them.
func heldByMany(hs []store.Holder) string {
	first, longest := firstAcquired(hs), hs[0]
	for _, h := range hs {
		if h.Acquired.Equal(first) {
			longest = h
			break
		}
	}
	s := "held by " + holdersCount(hs) + ": " + who(&longest)
	if len(hs) > 1 {
		s = "held by " + holdersCount(hs) + ", the longest by " + who(&longest)
	}
	if !first.IsZero() {
		s += " for " + max(0, time.Since(first)).Round(time.Second).String()
	}
	return s
}
