package filestore

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/store"
)

// AwaitDone waits for id to be marked done under key (see store.Store).
// The done file is only ever renamed into the key's directory, so an
// inotify watch of that directory (the one open, not whatever its path
// names later) for renames into it wakes the waiter for each mark, and
// for little else (a record or cancel request rewritten whole); each wake
// reads the file again. The watch is set before the first read, so no
// mark falls between the two.
func (s *Store) AwaitDone(ctx context.Context, key, id string) (*store.Done, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, err
	}
	kd, err := s.keyDir(key, false)
	if err != nil {
		return nil, err
	}
	defer kd.Close()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("filestore: inotify: %w", err)
	}
	ino := os.NewFile(uintptr(fd), "inotify") // read through Go's poller, so Close ends a read
	defer ino.Close()
	mask := uint32(unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF)
	if _, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(kd.FD), mask); err != nil {
		return nil, fmt.Errorf("filestore: watch %s: %w", kd.Path, err)
	}
	stop := context.AfterFunc(ctx, func() { ino.Close() })
	defer stop()
	buf := make([]byte, 4096)
	for {
		done, err := readDone(kd)
		if err != nil {
			return nil, err
		}
		if d := store.FindDone(done, id); d != nil {
			return d, nil
		}
		if _, err := ino.Read(buf); err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("filestore: watch %s: %w", kd.Path, err)
		}
	}
}
