package supervisor

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRunTrue is the supervisor's share of P1: start `true`, wait for
// it and make sure nothing of it is left; with a cgroup (created, the
// command cloned into it, removed) and without.
func BenchmarkRunTrue(b *testing.B) {
	b.Run("fallback", func(b *testing.B) { benchRunTrue(b, nil) })
	b.Run("cgroup", func(b *testing.B) {
		h, err := FindHierarchy()
		if err != nil {
			b.Skip(err)
		}
		benchRunTrue(b, h)
	})
}

func benchRunTrue(b *testing.B, h *Hierarchy) {
	env := append(os.Environ(), "FENCERUN_TICK=@bench")
	for b.Loop() {
		cfg := Config{Argv: []string{"/bin/true"}, Env: env, Marker: "FENCERUN_TICK=@bench", Grace: time.Second}
		if h != nil {
			cfg.Cgroup = h.NewPath()
		}
		p, err := start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if st := p.Wait(); st != (Status{}) {
			b.Fatal(st)
		}
	}
}

// BenchmarkStopSleep is the supervisor's share of P3: from Stop to the
// whole group dead and reaped.
func BenchmarkStopSleep(b *testing.B) {
	b.Run("fallback", func(b *testing.B) { benchStopSleep(b, nil) })
	b.Run("cgroup", func(b *testing.B) {
		h, err := FindHierarchy()
		if err != nil {
			b.Skip(err)
		}
		benchStopSleep(b, h)
	})
}

func benchStopSleep(b *testing.B, h *Hierarchy) {
	env := append(os.Environ(), "FENCERUN_TICK=@bench")
	for b.Loop() {
		b.StopTimer()
		cfg := Config{Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000 & exec sleep 1000"}, Env: env, Marker: "FENCERUN_TICK=@bench", Grace: time.Second}
		if h != nil {
			cfg.Cgroup = h.NewPath()
		}
		p, err := start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		p.Stop(10 * time.Second)
		if st := p.Wait(); st.Signal != syscall.SIGTERM {
			b.Fatal(st)
		}
	}
}

// BenchmarkScan is one reading of the tree, as Stop, Wait and Signal do.
func BenchmarkScan(b *testing.B) {
	p := &Process{pid: -1, marker: "FENCERUN_TICK=@bench"}
	for b.Loop() {
		if _, err := p.members(); err != nil {
			b.Fatal(err)
		}
	}
}
