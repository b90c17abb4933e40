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
func (k *keepAlives) send(ctx context.Context) (int64, error) { return k.start(ctx)() }

// start sends one keep-alive and returns at once; answer waits for the
// TTL granted (a lease that is gone: rpctypes.ErrLeaseNotFound), and is
// called once, before the next start. Whatever the caller sends in
// between goes out with the keep-alive and is answered with it: a
// renewal's compare (Lease.Renew).
func (k *keepAlives) start(ctx context.Context) (answer func() (int64, error)) {
	recv, err := k.stream(ctx)
	return func() (int64, error) {
		if err == nil {
			var ttl int64
			if ttl, err = recv(); err == nil {
				return ttl, nil
			}
		}
		if ctx.Err() != nil {
			return 0, err
		}
		ka, err := k.s.c.KeepAliveOnce(ctx, k.id)
		if err != nil {
			return 0, err
		}
		return ka.TTL, nil
	}
}

// stream sends a keep-alive on the stream, opened first if need be; recv
// reads its answer.
func (k *keepAlives) stream(ctx context.Context) (recv func() (int64, error), err error) {
	if k.st == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.s.c.Ctx()))
		// The stream outlives ctx, but its opening is bounded by it: on a
		// connection being redialled it waits for the connection.
		opening := context.AfterFunc(ctx, cancel)
		st, err := pb.NewLeaseClient(k.s.c.ActiveConnection()).LeaseKeepAlive(sctx)
		if !opening() {
			err = errors.Join(ctx.Err(), err)
		}
		if err != nil {
			cancel()
			return nil, err
		}
		k.st, k.cancel = st, cancel
	}
	// The stream lives past ctx: ctx ending drops it, which ends its Recv.
	st, stop := k.st, context.AfterFunc(ctx, k.cancel)
	failed := func(err error) error {
		if !stop() {
			err = errors.Join(ctx.Err(), err)
		}
		if err != nil {
			k.drop()
		}
		return err
	}
	if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.id)}); err != nil {
		return nil, failed(err)
	}
	return func() (int64, error) {
		resp, err := st.Recv()
		if err = failed(err); err != nil {
			return 0, err
		}
		if resp.TTL <= 0 {
			return 0, rpctypes.ErrLeaseNotFound
		}
		return resp.TTL, nil
	}, nil
}

// drop closes the stream; the next send opens another.
func (k *keepAlives) drop() {
	if k.st != nil {
		k.cancel()
		k.st, k.cancel = nil, nil
	}
}
