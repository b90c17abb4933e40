package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencerun/fencerun/cmd/internal/duration"
	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/resident"
	"github.com/fencerun/fencerun/store"
)

// acquireResident takes the resident role of a store file (R1-R8). Unlike a
// key, a busy role is not waited for unless --wait is given (R5, R8): a
// second instance of a worker is usually a mistake to report, a standby a
// decision to state.
func (r *RunCmd) acquireResident(ctx context.Context, g *Globals, claim store.Claim, path string, report *waitReport) (store.Lease, error) {
	if r.Build != "" {
		path = r.Build
	}
	noteResident(g, r.Resident)
	build, err := resident.BuildOf(path)
	if err != nil {
		// An unstamped build is never newer: the run can still hold a free
		// role, it just never asks for a handover.
		g.log.Warn("cannot read the command's build identity; it will never ask for a handover", "path", path, "error", err)
	}
	role, refusal, err := resident.Acquire(ctx, r.Resident, resident.Claim{
		Claim: claim, Build: build, StuckAfter: r.stuckAfter(),
		NoHandover: r.NoHandover, HandoverWait: r.HandoverWait, Logger: g.log,
	})
	if err != nil {
		return nil, r.notAcquired(err, report.gaveUpOn)
	}
	if refusal != nil {
		return nil, fenced.NotAcquiredf("%s", refusal)
	}
	return role, nil
}

func residentStatus(path string) (*store.Status, error) {
	st, err := resident.Status(path)
	if err != nil {
		return nil, fail(exitFailed, "%v", err)
	}
	return st, nil
}

// validResident refuses, before anything touches the disk, a --resident
// that names a directory or whose directory is missing.
func validResident(path string) error {
	if _, err := resident.StorePath(path); err != nil {
		return usage("%s", strings.TrimPrefix(err.Error(), "resident: "))
	}
	return nil
}

// validTarget checks that a command names exactly one of a key and a
// resident store, and that it is valid.
func validTarget(cmd, key, storePath string) error {
	switch {
	case key == "" && storePath == "":
		return usage("%s needs a KEY or --resident PATH", cmd)
	case key != "" && storePath != "":
		return usage("%s takes a KEY or --resident PATH, not both", cmd)
	case key != "":
		return validKey(key)
	}
	return validResident(storePath)
}

// releaseResident is `release --resident PATH --force`.
func releaseResident(path string) error {
	before, _ := resident.Status(path)
	had, repaired, err := resident.Revoke(path)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if repaired != nil {
		fmt.Printf("cleared the unreadable fence state of the resident role of %s (%s); its fencing tokens go on from %d\n",
			path, store.Printable(repaired.Cause.Error()), repaired.From)
	}
	switch {
	case !had && repaired != nil:
	case !had:
		fmt.Printf("the resident role of %s was free: nothing to release\n", path)
	case before != nil && before.Holder != nil:
		h := before.Holder
		fmt.Printf("released the resident role of %s: revoked %s, fence %d; its command is being stopped and it exits 76\n",
			path, who(h), h.Fence)
	default:
		fmt.Printf("released the resident role of %s: cleared its unreadable lock file; its fencing tokens go on above every earlier one\n", path)
	}
	return nil
}

// cancelResident is `cancel --resident PATH [--wait D]`.
func cancelResident(path string, wait duration.Wait) error {
	before, _ := resident.Status(path)
	had, err := resident.Cancel(path)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if !had {
		fmt.Printf("the resident role of %s is free: nothing to cancel\n", path)
		return nil
	}
	fmt.Printf("asked the resident of %s to stop its command (it exits 77)\n", path)
	if wait.None() || before == nil || before.Holder == nil {
		return nil
	}
	return waitLetGo("the resident role of "+path, []uint64{before.Holder.Fence}, wait, func() (*store.Status, error) { return resident.Status(path) })
}

// residentBook is what the file backend keeps of the resident roles a root
// has seen, for list.
type residentBook interface {
	NoteResident(storePath string) error
	Residents() ([]string, error)
}

// noteResident records the role of storePath in the state root, so that
// list shows it; failing to only costs that.
func noteResident(g *Globals, storePath string) {
	backend, err := g.openStore(true)
	if err != nil {
		return
	}
	real, err := resident.StorePath(storePath)
	if book, ok := backend.(residentBook); ok && err == nil {
		if err := book.NoteResident(real); err != nil {
			g.log.Warn("cannot note the resident role in the state root; list will not show it", "error", err)
		}
	}
}

// residentRoles is the status of every resident role the root has seen.
func residentRoles(g *Globals, backend store.Store) []store.Status {
	book, ok := backend.(residentBook)
	if !ok {
		return nil
	}
	paths, err := book.Residents()
	if err != nil {
		g.log.Warn("cannot read the resident roles of the state root", "error", err)
		return nil
	}
	var out []store.Status
	for _, p := range paths {
		st, err := resident.Status(p)
		if err != nil {
			st = &store.Status{Store: p, State: store.Corrupt, Waiters: []store.Holder{}, Err: err}
		}
		out = append(out, *st)
	}
	return out
}
