package filestore

import (
	"context"
	"fmt"

	"github.com/fencerun/fencerun/internal/notify"
	"github.com/fencerun/fencerun/store"
)

// A run with --once that waits for the key hears of its ID being marked
// done through the same internal/notify sockets a holder hears of a
// revocation by: it listens in the key's directory under a name of its
// own kind ("d-n-" and 32 hex digits), and a release that marks an ID
// done sends one byte to every such socket there after its write. Marks
// are rare (once an ID), so waking every awaiter of the key at each mark
// costs one read each and spares a registry of who awaits what.

// awaitPrefix starts an awaiter's socket name in its key directory.
const awaitPrefix = "d-"

// isAwaitName reports whether name is an awaiter's socket name.
func isAwaitName(name string) bool { return notify.IsName(name, awaitPrefix) }

// AwaitDone waits for id to be marked done under key (see store.Store).
// The socket is bound before the first read, so no mark falls between
// the two.
func (s *Store) AwaitDone(ctx context.Context, key, id string) (*store.Done, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	kd, err := s.keyDir(key, false)
	if err != nil {
		return nil, err
	}
	defer kd.Close()
	l, err := notify.Listen(kd.FD, kd.Path, awaitPrefix, kd.FileMode())
	if err != nil {
		return nil, err
	}
	defer l.Close()
	marks, failed := make(chan struct{}, 1), make(chan error, 1)
	l.Notify(marks, func(err error) { failed <- err })
	for {
		done, err := readDone(kd)
		if err != nil {
			return nil, err
		}
		if d := store.FindDone(done, id); d != nil {
			return d, nil
		}
		select {
		case <-marks:
		case err := <-failed:
			return nil, fmt.Errorf("filestore: await %s: %w", kd.Path, err)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// wakeAwaiters tells every run awaiting a mark in the key directory kd to
// read the done IDs again. It is best effort, like poke: an awaiter that
// is gone is not reached, and prune removes its socket.
func wakeAwaiters(kd dir) {
	names, _ := kd.List()
	for _, name := range names {
		if isAwaitName(name) {
			notify.Send(kd.FD, kd.Path, awaitPrefix, name)
		}
	}
}
