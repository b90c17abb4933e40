// Command etcdfloor is the bench's floor for P7's hold (P4 on etcd): the
// least a Go holder linking go.etcd.io/etcd/client/v3 at fencerun's version
// does to hold a lock of etcdctl's layout at a TTL of a few seconds and run
// a command under it. It is a yardstick, not a tool: the bench measures its
// CPU in the same hold beside fencerun and etcdctl, so that fencerun's
// figure can be read against what the library itself costs.
//
//	etcdfloor ENDPOINT KEY TTL-SECONDS COMMAND [ARG...]
//
// What it does, as E1/E2 and issue 11 ask of a holder: it grants a lease of
// TTL seconds, puts the contender key KEY/<lease hex> on it in one
// transaction that also reads the owner (concurrency.Mutex's layout and
// compare), and holds only if that key is the owner; it starts the command
// in a process group of its own; every TTL/3 it sends a keep-alive on a
// stream it keeps open and, in the same write, a compare transaction that
// the key still has its create revision (the request built once); the
// lease's expiry is counted from the send time of the last successful
// renewal on CLOCK_BOOTTIME, with one timerfd for both the next renewal and
// that deadline, and a renewal that fails for good (a lease or key gone) or
// a deadline reached SIGKILLs the command's group (E2, E3: at TTL 3 s the
// 1 s compare sees a deletion within a second, which is why it needs no
// watch); at the command's exit it deletes the key and revokes the lease.
// Its client has no logger and fixed flow-control windows (no BDP pings),
// as fencerun-etcd's.
//
// What it leaves out, which fencerun does and pays for: the command-line
// parser (kong) and the file binary's exec hop; waiting for a held lock (a
// busy key exits 75 at once) and so the waiter's keep-alives and watches;
// the watches on the holder key and its cancel key (cancel, and E3 at
// longer TTLs); the side keys (description, leftover record, cancel
// request) and the leftovers of a dead holder; cgroups, the subreaper and
// the tree sweep (S2); signal forwarding, terminals, job control (S7); the
// stop signal and grace before the SIGKILL; tick; status; TLS and auth; the
// message naming a bad cluster (E6), which here is only the error; the early
// dial beside the parse and Warm.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// reserve is how long before the lease's expiry the command is killed
// when renewals failed until then.
const reserve = 500 * time.Millisecond

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: etcdfloor ENDPOINT KEY TTL-SECONDS COMMAND [ARG...]")
		os.Exit(125)
	}
	ttl, err := strconv.ParseInt(os.Args[3], 10, 64)
	if err != nil || ttl < 2 {
		fmt.Fprintln(os.Stderr, "etcdfloor: TTL-SECONDS: a whole number of seconds, at least 2")
		os.Exit(125)
	}
	os.Exit(hold(os.Args[1], os.Args[2], ttl, os.Args[4:]))
}

func fail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "etcdfloor: %s: %v\n", what, err)
	return 125
}

func boottime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

func hold(endpoint, key string, ttl int64, argv []string) int {
	const window = 4 << 20
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window)},
	})
	if err != nil {
		return fail("connect", err)
	}
	defer c.Close()
	op := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		return clientv3.WithRequireLeader(ctx), cancel
	}

	ctx, cancel := op()
	sent := boottime()
	g, err := c.Grant(ctx, ttl)
	cancel()
	if err != nil {
		return fail("grant", err)
	}
	id := g.ID
	defer func() {
		ctx, cancel := op()
		_, _ = c.Revoke(ctx, id)
		cancel()
	}()
	myKey := key + "/" + strconv.FormatInt(int64(id), 16)
	// concurrency.Mutex's: put the key if it is not there, and read the
	// owner, the lowest create revision under the prefix.
	ctx, cancel = op()
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
		Then(clientv3.OpPut(myKey, "", clientv3.WithLease(id)), clientv3.OpGet(key+"/", clientv3.WithFirstCreate()...)).
		Commit()
	cancel()
	if err != nil {
		return fail("put "+myKey, err)
	}
	rev := resp.Header.Revision
	if owner := resp.Responses[1].GetResponseRange().Kvs; len(owner) == 0 || owner[0].CreateRevision != rev {
		fmt.Fprintf(os.Stderr, "etcdfloor: %s is held\n", key)
		return 75
	}
	deadline := sent + time.Duration(g.TTL)*time.Second - reserve
	defer func() {
		ctx, cancel := op()
		_, _ = c.Delete(ctx, myKey)
		cancel()
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "ETCD_LOCK_KEY="+myKey, "ETCD_LOCK_REV="+strconv.FormatInt(rev, 10), "FENCERUN_FENCE="+strconv.FormatInt(rev, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail("start", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

	// One CLOCK_BOOTTIME timerfd: the next renewal, or the deadline.
	tfd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		kill()
		return fail("timerfd", err)
	}
	timer := os.NewFile(uintptr(tfd), "timerfd")
	arm := func(at time.Duration) {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(at, 1)))}
		_ = unix.TimerfdSettime(tfd, unix.TFD_TIMER_ABSTIME, &spec, nil)
	}
	fired := make(chan struct{})
	go func() {
		var b [8]byte
		for {
			if _, err := timer.Read(b[:]); err != nil {
				return
			}
			fired <- struct{}{}
		}
	}()

	every := time.Duration(ttl) * time.Second / 3
	mine := clientv3.Compare(clientv3.CreateRevision(myKey), "=", rev)
	r := renewer{c: c, kv: pb.NewKVClient(c.ActiveConnection()), id: id, check: &pb.TxnRequest{Compare: []*pb.Compare{mine.GetCompare()}}}
	defer r.drop()
	arm(sent + every)
	for {
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ee.ExitCode()
			}
			if err != nil {
				return fail("wait", err)
			}
			return 0
		case <-fired:
		}
		now := boottime()
		if now >= deadline {
			kill()
			<-exited
			fmt.Fprintln(os.Stderr, "etcdfloor: the lease could not be renewed in time")
			return 76
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(every, deadline-now))
		granted, err := r.renew(clientv3.WithRequireLeader(ctx))
		cancel()
		switch {
		case errors.Is(err, errLost):
			kill()
			<-exited
			fmt.Fprintf(os.Stderr, "etcdfloor: %s: %v\n", myKey, err)
			return 76
		case err == nil:
			deadline = now + granted - reserve
			arm(now + every)
		default:
			arm(min(boottime()+every/4, deadline))
		}
	}
}

var errLost = errors.New("the lease or the key is gone")

// renewer sends a renewal's keep-alive on a kept stream and the compare
// beside it, then reads both answers.
type renewer struct {
	c      *clientv3.Client
	kv     pb.KVClient
	id     clientv3.LeaseID
	check  *pb.TxnRequest
	st     pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

func (r *renewer) renew(ctx context.Context) (_ time.Duration, err error) {
	if r.st == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.c.Ctx()))
		st, err := pb.NewLeaseClient(r.c.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return 0, err
		}
		r.st, r.cancel = st, cancel
	}
	// A hung stream ends with ctx, and a failed one is opened again.
	stop := context.AfterFunc(ctx, r.cancel)
	defer func() {
		if !stop() || err != nil && !errors.Is(err, errLost) {
			r.drop()
		}
	}()
	if err := r.st.Send(&pb.LeaseKeepAliveRequest{ID: int64(r.id)}); err != nil {
		return 0, err
	}
	txn, terr := r.kv.Txn(ctx, r.check, grpc.WaitForReady(true))
	ka, kerr := r.st.Recv()
	if kerr != nil {
		return 0, kerr
	}
	if terr != nil {
		return 0, terr
	}
	if ka.TTL <= 0 || !txn.Succeeded {
		return 0, errLost
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

func (r *renewer) drop() {
	if r.cancel != nil {
		r.cancel()
		r.st, r.cancel = nil, nil
	}
}
