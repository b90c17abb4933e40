package etcdstore

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAlives sends the keep-alives of one lease on a stream of its own,
// opened at the first and kept for the next: a stream per keep-alive
// (KeepAliveOnce) costs a renewal twice the CPU (P4) and a waiter's take
// the time to open one (P7). It is one goroutine's at a time and carries
// one request at a time, so every response answers the request just sent.
// A stream that fails or outlives ctx is dropped, and that keep-alive
// falls back to KeepAliveOnce, which waits for a connection and retries
// within ctx.
type keepAlives struct {
	s      *Store
	id     clientv3.LeaseID
	st     pb.Lease_LeaseKeepAliveClient // nil until the first, and after a failure
	cancel context.CancelFunc
}

// send sends one keep-alive and returns the TTL granted; a lease that is
// gone is rpctypes.ErrLeaseNotFound.
func (k *keepAlives) send(ctx context.Context) (int64, error) {
	if ttl, err := k.stream(ctx); err == nil || ctx.Err() != nil {
		return ttl, err
	}
	ka, err := k.s.c.KeepAliveOnce(ctx, k.id)
	if err != nil {
		return 0, err
	}
	return ka.TTL, nil
}

func (k *keepAlives) stream(ctx context.Context) (int64, error) {
	if k.st == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.s.c.Ctx()))
		st, err := pb.NewLeaseClient(k.s.c.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return 0, err
		}
		k.st, k.cancel = st, cancel
	}
	// The stream lives past ctx: ctx ending drops it, which ends its Recv.
	stop := context.AfterFunc(ctx, k.cancel)
	resp, err := k.roundTrip()
	if !stop() {
		err = errors.Join(ctx.Err(), err)
	}
	if err != nil {
		k.drop()
		return 0, err
	}
	if resp.TTL <= 0 {
		return 0, rpctypes.ErrLeaseNotFound
	}
	return resp.TTL, nil
}

func (k *keepAlives) roundTrip() (*pb.LeaseKeepAliveResponse, error) {
	if err := k.st.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.id)}); err != nil {
		return nil, err
	}
	return k.st.Recv()
}

// drop closes the stream; the next send opens another.
func (k *keepAlives) drop() {
	if k.st != nil {
		k.cancel()
		k.st, k.cancel = nil, nil
	}
}
