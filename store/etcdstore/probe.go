package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// prober keeps the connection that carries a waiter's watch in use, so
// that a member that goes silent under it is noticed (E7): a watch reads
// nothing while its key does not change, and a connection that reads
// nothing is pinged only after gRPC's floor of 10 s (see keepAliveTime),
// which at TTL 6 left a waiter blind to the free lease for longer than
// the failover P9 allows. Each poke asks for a progress report on the
// watch stream of the require-leader watches (etcd 3.4 and later answer at
// once), whose bytes the member must acknowledge within keepAliveTimeout,
// or the connection is closed and the watches resume on a live member.
// Waiters poke it with every keep-alive, every third of the TTL; the
// report itself is no event, and the watchers skip it.
//
// A holder does not: a holder's watch is its quick path to a revocation
// (E3), and every renewal's compare, sent every third of the TTL on a
// connection the keep-alive checks, sees a revocation too; the gRPC ping
// checks the watch's connection within 11 s. The probe doubled a hold's
// CPU (P4 on etcd: 94 ms a 60 s hold at TTL 3 s, against 49 ms).
//
// One prober serves a Store (the watches of a client share one stream),
// and asks at most once every probeSpacing: the report goes to every watch
// on the stream, so many waiters in one process (a test's) must not each
// ask.
type prober struct {
	c    *clientv3.Client
	poke chan struct{}
}

// probeSpacing is the least time between two progress requests.
const probeSpacing = time.Second

// startProber starts the goroutine that asks, until ctx ends. A request
// waits while the stream is being opened again (there is then nothing to
// probe), and pokes meanwhile are dropped: a poke never delays its caller.
func startProber(ctx context.Context, c *clientv3.Client) *prober {
	p := &prober{c: c, poke: make(chan struct{}, 1)}
	go func() {
		wctx := clientv3.WithRequireLeader(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.poke:
			}
			_ = p.c.RequestProgress(wctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(probeSpacing):
			}
		}
	}()
	return p
}

// watchProber is the Store's prober, started at the first use.
func (s *Store) watchProber() *prober {
	s.proberOnce.Do(func() { s.prober = startProber(s.c.Ctx(), s.c) })
	return s.prober
}

// Poke asks for a progress report, without waiting.
func (p *prober) Poke() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}
