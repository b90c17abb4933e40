package ticksock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencerun/fencerun/internal/testsupport"
	"github.com/fencerun/fencerun/internal/unixsock"
)

func TestTickTakenOnlyFromTheCommandsTree(t *testing.T) {
	s, err := Listen(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	owned := make(chan bool, 1)
	owned <- true
	ticked := make(chan time.Time, 1)
	seen := make(chan int, 2)
	go s.Serve(func(pid int) bool {
		select { // asked again while a peer of our own user is not (yet) owned
		case seen <- pid:
		default:
		}
		v := <-owned
		owned <- v
		return v
	}, closed(), func(at time.Time) { ticked <- at })
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), testsupport.Guard)
	defer cancel()
	if err := Send(ctx, s.Addr()); err != nil {
		t.Fatalf("tick from an owned process: %v", err)
	}
	if pid := testsupport.Recv(t, seen, "peer pid"); pid != os.Getpid() {
		t.Errorf("peer pid %d, want %d (SO_PEERCRED of the caller)", pid, os.Getpid())
	}
	testsupport.Recv(t, ticked, "the tick")

	<-owned
	owned <- false
	err = Send(ctx, s.Addr())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not a process of the command") {
		t.Fatalf("tick from a stranger: %v, want ErrRefused naming why", err)
	}
	select {
	case <-ticked:
		t.Fatal("a refused tick was stamped")
	default:
	}
}

// closed is a known channel for a tree known from the start.
func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// A command that ticks before the holder has seen its start (on a loaded
// machine the holder may not run for longer than any fixed wait between
// the command's fork and learning its pid) is answered once the tree is
// known, however long that takes: before, it was refused after a second,
// and a command that checks its tick failed.
func TestTickBeforeTheTreeIsKnownWaitsForIt(t *testing.T) {
	s, err := Listen(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.moment = 10 * time.Millisecond
	var started atomic.Bool
	asked := make(chan int, 1)
	known := make(chan struct{})
	ticked := make(chan time.Time, 1)
	go s.Serve(func(pid int) bool {
		select {
		case asked <- pid:
		default:
		}
		return started.Load()
	}, known, func(at time.Time) { ticked <- at })

	ctx, cancel := context.WithTimeout(context.Background(), testsupport.Guard)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- Send(ctx, s.Addr()) }()
	testsupport.Recv(t, asked, "the question at accept")
	// Ten times the moment: time enough for the refusal a fixed wait would
	// give, so that this test fails without the wait for known. The wait
	// proves nothing when it passes; it cannot make the test fail.
	time.Sleep(10 * s.moment)
	started.Store(true)
	close(known)
	if err := testsupport.Recv(t, sent, "the tick's answer"); err != nil {
		t.Fatalf("a tick from the tree before it was known: %v", err)
	}
	testsupport.Recv(t, ticked, "the tick")
}

func TestTickWithNoHolder(t *testing.T) {
	ctx := context.Background()
	if err := Send(ctx, "/tmp/somewhere"); err == nil || !strings.Contains(err.Error(), "not an address fencerun gave out") {
		t.Errorf("foreign address: %v", err)
	}
	s, err := Listen(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	s.Close()
	if err := Send(ctx, addr); err == nil || !strings.Contains(err.Error(), "not there") {
		t.Errorf("closed holder: %v", err)
	}
}

// A process that is not of the command's tree is hung up on at accept,
// before it holds a slot: however many idle connections it keeps open, the
// tree's ticks go through (the flood that made a healthy worker stuck).
func TestIdleStrangersDoNotStarveTheTree(t *testing.T) {
	if os.Getenv("FENCERUN_TEST_FLOOD") != "" {
		floodMain()
		return
	}
	dir := t.TempDir()
	s, err := Listen(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ticked := make(chan time.Time, 1)
	self := os.Getpid()
	go s.Serve(func(pid int) bool { return pid == self }, closed(), func(at time.Time) {
		select {
		case ticked <- at:
		default:
		}
	})

	flood := exec.Command(os.Args[0], "-test.run=^TestIdleStrangersDoNotStarveTheTree$")
	flood.Env = append(os.Environ(), "FENCERUN_TEST_FLOOD="+s.Addr())
	out, err := flood.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { flood.Process.Kill(); flood.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "connected ") {
		t.Fatalf("flood helper: %q, %v", line, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "connected ")))
	if n < 4*maxCallers {
		t.Fatalf("the helper opened only %d connections", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testsupport.Guard)
	defer cancel()
	for i := range 3 {
		if err := Send(ctx, s.Addr()); err != nil {
			t.Fatalf("tick %d with %d idle strangers connected: %v", i, n, err)
		}
		testsupport.Recv(t, ticked, "the tick")
	}
}

// floodMain opens many connections to the tick socket, answers how many
// it has open, and keeps them idle until killed.
func floodMain() {
	addr := os.Getenv("FENCERUN_TEST_FLOOD")
	var conns []net.Conn
	for range 100 {
		c, err := unixsock.Dial(context.Background(), "unix", addr)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	fmt.Printf("connected %d\n", len(conns))
	select {}
}

// The tick address is a path whatever the directory's length: past
// sun_path's 107 bytes it is reached through the directory's descriptor.
func TestTickSocketInADeepDirectory(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 200 {
		dir = filepath.Join(dir, strings.Repeat("d", 40))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !IsAddr(s.Addr()) || !strings.HasPrefix(s.Addr(), dir+"/") {
		t.Fatalf("address %q", s.Addr())
	}
	ticked := make(chan time.Time, 1)
	go s.Serve(func(int) bool { return true }, closed(), func(at time.Time) { ticked <- at })
	ctx, cancel := context.WithTimeout(context.Background(), testsupport.Guard)
	defer cancel()
	if err := Send(ctx, s.Addr()); err != nil {
		t.Fatalf("tick over a %d-byte path: %v", len(s.Addr()), err)
	}
	testsupport.Recv(t, ticked, "the tick")
	s.Close()
	if _, err := os.Lstat(s.Addr()); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestIsAddr(t *testing.T) {
	good := "/var/lib/fencerun/ticks/t-0123456789abcdef0123456789abcdef"
	for addr, want := range map[string]bool{
		good: true,
		"@fencerun-tick-0123456789abcdef0123456789abcdef": false,
		"ticks/t-0123456789abcdef0123456789abcdef":        false,
		"/x/../ticks/t-0123456789abcdef0123456789abcdef":  false,
		"/ticks/t-0123456789ABCDEF0123456789abcdef":       false,
		"/ticks/t-0123456789abcdef0123456789abcde":        false,
		"/ticks/x-0123456789abcdef0123456789abcdef":       false,
		"/ticks/t-0123456789abcdef0123456789abcdef/":      false,
	} {
		if got := IsAddr(addr); got != want {
			t.Errorf("IsAddr(%q) = %v", addr, got)
		}
	}
	if m := Marker(good); m != "FENCERUN_TICK="+good {
		t.Errorf("Marker = %q", m)
	}
}

// Two Closes at once (package fenced's at the command's end, the run's as
// it returns, just before the process exits): each returns only once the
// socket file is gone. Before, the second returned at once with the
// listener's error, and a process exiting then left its socket behind.
func TestCloseWaitsForTheSocketsRemoval(t *testing.T) {
	for i := 0; i < 200; i++ {
		s, err := Listen(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { s.Close(); close(done) }()
		s.Close()
		if _, err := os.Lstat(s.Addr()); !os.IsNotExist(err) {
			t.Fatalf("the socket %s after Close returned: %v, want it gone", s.Addr(), err)
		}
		<-done
	}
}

// Issue 26 point 8: a process of the tree that connects and writes
// without a newline is hung up on after a tick request's few bytes; the
// holder once read it all (bufio's ReadString), and grew to 2 GB in 2 s.
// Here the caller writes up to 64 MiB: the holder must stop reading (the
// write fails) long before, within what the socket's buffers hold.
func TestATickRequestIsBounded(t *testing.T) {
	s, err := Listen(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(func(int) bool { return true }, closed(), func(time.Time) {})
	defer s.Close()
	conn, err := net.Dial("unix", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testsupport.Guard))
	chunk := []byte(strings.Repeat("x", 64<<10))
	written := 0
	for written < 64<<20 {
		n, err := conn.Write(chunk)
		written += n
		if err != nil {
			break
		}
	}
	if written >= 8<<20 {
		t.Fatalf("the holder read %d bytes of one tick request without a newline", written)
	}
}
