package supervisor

import (
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// caught is this process's one signal subscription (Catch).
var caught struct {
	once sync.Once
	out  chan os.Signal
}

// Catch subscribes this process, in its one signal.Notify, to sigs, which
// it hands on through the channel it returns (without waiting: a signal
// that finds it full is dropped, as os/signal drops it), and to the
// signals the supervisor acts on itself:
//
//   - SIGCHLD, on which it reaps the dead orphans of running commands;
//   - SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT, but those the caller ignored
//     (they stay ignored, for the command too): while a command runs they
//     go to its Process (JobControl); otherwise a stop signal stops this
//     process as its default action would;
//   - SIGPIPE, dropped: a write to a closed pipe fails rather than kills
//     this process with its command's tree left. The command gets its
//     default back at exec.
//
// Each signal a process subscribes to costs a round trip to the Go
// runtime's signal-mask thread, and a signal.Stop another, so this is done
// once, for good. Only the first call subscribes: later ones (and Start,
// which calls it) return the same channel, and their sigs are not
// subscribed.
func Catch(sigs ...os.Signal) <-chan os.Signal {
	caught.once.Do(func() {
		reg.mu.Lock()
		reg.procs = make(map[int]*Process)
		reg.listeners = make(map[*Process]bool)
		reg.mu.Unlock()
		all := slices.Concat(sigs, []os.Signal{syscall.SIGCHLD, syscall.SIGPIPE})
		for _, s := range append(jobSignals, syscall.SIGCONT) {
			if !CallerIgnored(s) {
				all = append(all, s)
			}
		}
		caught.out = make(chan os.Signal, 8)
		in := make(chan os.Signal, 8)
		signal.Notify(in, all...)
		go dispatch(in, caught.out)
	})
	return caught.out
}

// dispatch hands each signal of in to whoever acts on it (see Catch).
func dispatch(in <-chan os.Signal, out chan<- os.Signal) {
	for s := range in {
		switch s {
		case syscall.SIGCHLD:
			// Else each Process reaps all: see pidns_linux.go.
			if !foreignProc() && deadOrphans() {
				reapAdopted()
			}
		case syscall.SIGPIPE:
		case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT:
			if !reg.deliver(s) && s != syscall.SIGCONT {
				stopAsDefault(s.(syscall.Signal))
			}
		default:
			select {
			case out <- s:
			default:
			}
		}
	}
}

// deliver hands a job signal or SIGCONT to every listening Process,
// without waiting: one it has not taken yet stands for the next. It
// reports whether one listened.
func (r *registry) deliver(s os.Signal) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.listeners {
		to := p.jobSigs
		if s == syscall.SIGCONT {
			to = p.cont
		}
		select {
		case to <- s:
		default:
		}
	}
	return len(r.listeners) > 0
}

// stopAsDefault stops this process alone with sig, a stop signal no
// Process listens for, as its default action would have had it not been
// caught (Ctrl-Z while fencerun waits for its lease), and puts the
// handler back once it is continued.
func stopAsDefault(sig syscall.Signal) {
	if restore, err := stopWith(os.Getpid(), sig); err == nil {
		restore()
	}
}
