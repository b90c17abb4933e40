package fence

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTickTakenOnlyFromTheCommandsTree(t *testing.T) {
	s, err := ListenTicks(nil)
	if err != nil {
		t.Fatal(err)
	}
	owned := make(chan bool, 1)
	owned <- true
	ticked := make(chan time.Time, 1)
	seen := make(chan int, 2)
	go s.Serve(func(pid int) bool {
		seen <- pid
		v := <-owned
		owned <- v
		return v
	}, func(at time.Time) { ticked <- at })
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := SendTick(ctx, s.Addr()); err != nil {
		t.Fatalf("tick from an owned process: %v", err)
	}
	if pid := recv(t, seen, "peer pid"); pid != os.Getpid() {
		t.Errorf("peer pid %d, want %d (SO_PEERCRED of the caller)", pid, os.Getpid())
	}
	recv(t, ticked, "the tick")

	<-owned
	owned <- false
	err = SendTick(ctx, s.Addr())
	if !errors.Is(err, ErrTickRefused) || !strings.Contains(err.Error(), "not a process of the command") {
		t.Fatalf("tick from a stranger: %v, want ErrTickRefused naming why", err)
	}
	select {
	case <-ticked:
		t.Fatal("a refused tick was stamped")
	default:
	}
}

func TestTickWithNoHolder(t *testing.T) {
	ctx := context.Background()
	if err := SendTick(ctx, "/tmp/somewhere"); err == nil || !strings.Contains(err.Error(), "not an address fencerun gave out") {
		t.Errorf("foreign address: %v", err)
	}
	s, err := ListenTicks(nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	s.Close()
	if err := SendTick(ctx, addr); err == nil || !strings.Contains(err.Error(), "not there") {
		t.Errorf("closed holder: %v", err)
	}
}
