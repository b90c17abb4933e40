package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// S10 on etcd: a waiter whose predecessor is a contender of this host
// whose process is gone (SIGKILLed while it waited or held) does not wait
// for that contender's lease to expire. It revokes that lease, as prune
// would (admin.go), and its watch then sees the deletion. A predecessor
// that is alive is watched by a pidfd beside the key, so that its death
// wakes the waiter at once. Only a fencerun contender names its pid and
// host (its desc); an etcdctl lock's lease, or another host's, expires by
// itself. A pid reused since is taken for the contender (alive): the
// waiter then waits for the lease, as before, never revoking a live one.

// waitAhead waits for the contender kv ahead to go (waitDelete), and
// revokes its lease first, or once it dies, where it is a fencerun of
// this host whose process is gone.
func (a *acquirer) waitAhead(ctx context.Context, kv *mvccpb.KeyValue, rev int64) error {
	pid := a.localAhead(ctx, kv)
	if pid == 0 {
		return a.waitDelete(ctx, string(kv.Key), rev, nil)
	}
	if a.revokeDead(ctx, kv, pid) {
		return nil // its key went with its lease: take again
	}
	died := make(chan struct{})
	stop := onDeath(pid, func() { close(died) })
	defer stop()
	if err := a.waitDelete(ctx, string(kv.Key), rev, died); err != nil {
		return err
	}
	select {
	case <-died:
		a.revokeDead(ctx, kv, pid)
	default:
	}
	return nil
}

// localAhead is the pid of the contender whose key is kv, if it is a
// fencerun of this host; 0 if it is not, or if it cannot be told.
func (a *acquirer) localAhead(ctx context.Context, kv *mvccpb.KeyValue) int {
	if h, ok := a.known[string(kv.Key)]; ok {
		// Read as it queued (queued): a contender's pid and host never
		// change.
		if h.Foreign || h.Host != a.s.host || h.PID <= 0 {
			return 0
		}
		return h.PID
	}
	octx, cancel := a.s.op(ctx)
	defer cancel()
	resp, err := a.s.c.Get(octx, descKey(clientv3.LeaseID(kv.Lease)))
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	var d desc
	if json.Unmarshal(resp.Kvs[0].Value, &d) != nil || d.Host != a.s.host || d.PID <= 0 {
		return 0
	}
	return d.PID
}

// revokeDead revokes the lease of the contender kv, whose process pid of
// this host is gone (revokeLease).
func (a *acquirer) revokeDead(ctx context.Context, kv *mvccpb.KeyValue, pid int) bool {
	return a.revokeLease(ctx, clientv3.LeaseID(kv.Lease), pid)
}

// revokeLease revokes the lease id of a contender whose process pid of
// this host is gone, and says so; false if pid lives or the revoke failed
// (the lease then expires by itself).
func (a *acquirer) revokeLease(ctx context.Context, id clientv3.LeaseID, pid int) bool {
	if alive(pid) {
		return false
	}
	octx, cancel := a.s.op(ctx)
	defer cancel()
	_, err := a.s.c.Revoke(octx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.s.log.Debug("could not revoke a dead contender's lease; it expires by itself", "key", a.key, "pid", pid, "error", err)
		return false
	}
	a.s.log.Debug("revoked the lease of a dead contender ahead", "key", a.key, "pid", pid)
	return true
}

// onDeath calls died once when the process pid exits, until stop is
// called; a pid that cannot be watched is never reported.
func onDeath(pid int, died func()) (stop func()) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return func() {}
	}
	f := os.NewFile(uintptr(fd), "pidfd") // nonblocking: read through Go's poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return func() {}
	}
	go func() {
		waited := false
		err := rc.Read(func(uintptr) bool { done := waited; waited = true; return done })
		if err == nil {
			died()
		}
	}()
	return func() { f.Close() }
}
