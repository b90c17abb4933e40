package integration

import (
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencerun/fencerun/internal/boottime"
	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// TestEtcdWrapperKilledByItsCommandAtOnce: the command SIGKILLs its own
// wrapper as the first thing it does after starting a process that left
// its group and session, before any renewal, tick or SetCommand's delayed
// write could carry the command's record (with a cgroup it rides on the
// next write). The next holder on this host must still find and stop that
// process before its own command starts (S2, E5), with a cgroup (also for
// a process that cleared its environment) and without one (a process that
// keeps FENCERUN_TICK, which is what the fallback finds on etcd).
func TestEtcdWrapperKilledByItsCommandAtOnce(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	for _, tc := range []struct{ name, cgroup, spawn string }{
		{"cgroup", "auto", "setsid sleep 1000"},
		{"cgroup-env-cleared", "auto", "setsid env -i sleep 1000"},
		{"no-cgroup", "off", "setsid sleep 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			key := "killed-" + tc.name
			left := filepath.Join(dir, "leftover")
			h := onEtcd(t, eps, "run", "--key", key, "--ttl", "2", "--cgroup", tc.cgroup, "--", "sh", "-c",
				tc.spawn+" </dev/null >/dev/null 2>&1 & echo $! > "+left+".tmp; mv "+left+".tmp "+left+"; kill -9 $PPID; exec sleep 1000")
			startLogged(t, h, dir, "holder")
			if code := exitOf(t, h); code != 128+9 && code != -1 {
				t.Logf("holder exited %d", code)
			}
			waitFile(t, left)
			pid := readPids(left)[0]
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if !alive(pid) {
				t.Fatal("the leftover died with the wrapper: the test shows nothing")
			}
			next := onEtcd(t, eps, "run", "--key", key, "--ttl", "2", "--cgroup", tc.cgroup, "--", "touch", filepath.Join(dir, "next-started"))
			log := startLogged(t, next, dir, "next")
			code := exitOf(t, next)
			if alive(pid) {
				data, _ := os.ReadFile(log)
				t.Errorf("the next holder (exit %d) left the dead holder's leftover pid %d running\n%s", code, pid, data)
			}
			if _, err := os.Stat(filepath.Join(dir, "next-started")); err != nil || code != 0 {
				data, _ := os.ReadFile(log)
				t.Errorf("next holder exited %d, started: %v\n%s", code, err == nil, data)
			}
		})
	}
}

// delayProxy forwards TCP connections to upstream, holding back every
// byte from the server for delay (once set): a slow network on the way
// back only. Requests reach the server at once.
type delayProxy struct {
	ln    net.Listener
	delay atomic.Int64 // nanoseconds
}

func startDelayProxy(t *testing.T, upstream string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(u, c); u.Close() }()
			go p.back(c, u)
		}
	}()
	return p
}

// back copies from the server to the client, each chunk released delay
// after it was read, in order.
func (p *delayProxy) back(c, u net.Conn) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer c.Close()
		for ch := range q {
			time.Sleep(time.Until(ch.due))
			if _, err := c.Write(ch.data); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 64<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(time.Duration(p.delay.Load())), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}

// TestEtcdTermCountsFromTheSendNotTheAnswer: E2 against the server's own
// clock. Answers come back late (2 s) while requests reach the server at
// once, so the server extends the lease when the keep-alive is sent: a
// keeper that counted its term from the answer would believe in its lease
// 2 s longer than the server keeps it. After each renewal the server is
// asked (directly, not through the slow path) how long the lease has left;
// the keeper's valid_until must not lie past that.
func TestEtcdTermCountsFromTheSendNotTheAnswer(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	u, err := url.Parse(strings.Split(c.Endpoints(), ",")[0])
	if err != nil {
		t.Fatal(err)
	}
	p := startDelayProxy(t, u.Host)
	const ttl = 15 * time.Second // renewals every 5 s; a renewal may take 5 s
	h := onEtcd(t, "http://"+p.ln.Addr().String(), "run", "--key", "slowback", "--ttl", "15", "--dial-timeout", "10s", "--", "sh", "-c", stopScript)
	log := startLogged(t, h, t.TempDir(), "holder")
	waitFile(t, filepath.Join(h.Dir, "key"))
	lockKey := strings.TrimSpace(waitFile(t, filepath.Join(h.Dir, "key")))
	id, err := strconv.ParseInt(lockKey[strings.LastIndex(lockKey, "/")+1:], 16, 64)
	if err != nil {
		t.Fatalf("lock key %q: %v", lockKey, err)
	}
	p.delay.Store(int64(2 * time.Second))
	cl := c.Client()
	renewals := func() int { b, _ := os.ReadFile(log); return strings.Count(string(b), "renewed") }
	seen := renewals()
	for checked := 0; checked < 2; {
		if err := waitFor(func() bool { return renewals() > seen }); err != nil {
			data, _ := os.ReadFile(log)
			t.Fatalf("no renewal through the slow path\n%s", data)
		}
		seen = renewals()
		resp, err := cl.TimeToLive(context.Background(), clientv3.LeaseID(id))
		after := boottime.Now()
		if err != nil {
			t.Fatal(err)
		}
		if renewals() != seen {
			continue // another renewal came between: read again
		}
		checked++
		// The server's expiry is before after+TTL+1s: it
		// truncates the seconds left.
		serverBy := after + time.Duration(resp.TTL+1)*time.Second
		keeperBy := lastTermEnd(t, log)
		if keeperBy > serverBy+50*time.Millisecond {
			t.Errorf("the keeper counts its lease valid %v past the server's expiry (server: %d s left; ttl %v)", keeperBy-serverBy, resp.TTL, ttl)
		} else {
			t.Logf("keeper's expiry %v before the server's latest", serverBy-keeperBy)
		}
	}
	h.Process.Signal(syscall.SIGTERM)
	exitOf(t, h)
}

// TestEtcdNestedKeyTakeSparesTheLiveHolderBelowIt: key "a/b"'s contender
// keys lie under key "a"'s lock prefix (as etcdctl lock's do), and its
// leftover record lay under key "a"'s leftover prefix. A waiter on "a"
// that takes the lease while "a/b" is held (taken after the waiter queued,
// so not an older contender) must not take the live "a/b" holder's record
// for a dead predecessor's and stop its command.
func TestEtcdNestedKeyTakeSparesTheLiveHolderBelowIt(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	eps := c.Endpoints()
	cl := c.Client()
	dir := t.TempDir()
	hold := func(key, name string) *exec.Cmd {
		h := onEtcd(t, eps, "run", "--key", key, "--ttl", "5", "--", "sh", "-c",
			"echo $$ > "+filepath.Join(dir, name)+".tmp; mv "+filepath.Join(dir, name)+".tmp "+filepath.Join(dir, name)+
				"; while [ ! -e "+filepath.Join(dir, name+".go")+" ]; do sleep 0.01; done")
		startLogged(t, h, dir, name)
		return h
	}
	first := hold("nest", "first")
	waitFile(t, filepath.Join(dir, "first"))
	waiter := hold("nest", "waiter")
	waitContenders(t, cl, "nest", 2)
	below := hold("nest/b", "below")
	waitFile(t, filepath.Join(dir, "below"))
	belowPid := readPids(filepath.Join(dir, "below"))[0]
	os.WriteFile(filepath.Join(dir, "first.go"), nil, 0o644)
	if code := exitOf(t, first); code != 0 {
		t.Fatalf("first holder exited %d", code)
	}
	waitFile(t, filepath.Join(dir, "waiter"))
	if !alive(belowPid) {
		data, _ := os.ReadFile(filepath.Join(dir, "waiter.log"))
		t.Errorf("taking %q stopped the live holder of %q (its command pid %d)\n%s", "nest", "nest/b", belowPid, data)
	}
	os.WriteFile(filepath.Join(dir, "waiter.go"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "below.go"), nil, 0o644)
	if code := exitOf(t, waiter); code != 0 {
		t.Errorf("waiter exited %d", code)
	}
	if code := exitOf(t, below); code != 0 {
		data, _ := os.ReadFile(filepath.Join(dir, "below.log"))
		t.Errorf("the holder of %q exited %d\n%s", "nest/b", code, data)
	}
}
