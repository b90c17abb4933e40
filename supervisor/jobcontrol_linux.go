package supervisor

import (
	"context"
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fencerun/fencerun/internal/logfield"
)

// Keeper is what job control asks before a stopped command may run again;
// *fence.Keeper is one.
type Keeper interface {
	// Pause: this process is about to stop itself with its command.
	Pause()
	// Resume: this process runs again; nil if the lease is still held.
	Resume(ctx context.Context) error
}

// jobSignals stop a job from a terminal. Sent to this process, each is
// sent to the command's tree first (kill -TSTP of the wrapper stops the
// command, not only the wrapper).
var jobSignals = []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

// JobControl forwards the signals of forward to the command's tree (with
// Signal), but for those ends returns an error for: then it returns that
// error. It makes the command and this process one job, as a shell sees
// it, until done is closed. Call it once the command runs; done should
// close when the tree is gone, so that a command being stopped still gets
// its signals.
//
// SIGTSTP, SIGTTIN and SIGTTOU sent to this process are sent to the
// command's tree. Under a terminal (this process has a controlling one and
// its process group is not orphaned), when the command stops (Ctrl-Z,
// SIGTTIN of a background read, SIGSTOP), this process stops its own
// process group with the same signal, so that the shell sees the job
// stopped and gives its prompt back; first it tells k (Pause) and stops the
// tree's processes outside the command's group, so that nothing of the
// tree runs while the lease is not renewed. When this process is
// continued (fg, bg, or a SIGCONT after kill), it asks k (Resume) before
// anything else: if the lease was lost meanwhile, the tree is SIGKILLed
// without running again and JobControl returns k's error; otherwise the
// signals that came with the continue (bash's kill of a stopped job sends
// SIGTERM, then SIGCONT) are forwarded, the command's group is given the
// terminal's foreground if this process has it (fg, not bg), and the tree
// is continued. A command that stops on the terminal (SIGTTIN, SIGTTOU)
// after a signal was forwarded to it, which it may not have acted on yet,
// or with one waiting in forward (os/signal may hand bash's SIGTERM over
// after its SIGCONT), is continued once more instead of stopping the job.
//
// Without a terminal this process never stops itself: a command stopped
// by SIGSTOP stays stopped and fenced, and Signal follows any other signal
// to it with SIGCONT. A SIGCONT sent to this process is sent to the tree.
// A command that ignores a SIGTSTP sent to this process does not stop, and
// then neither does this process.
func (p *Process) JobControl(done <-chan struct{}, k Keeper, forward <-chan os.Signal, ends func(os.Signal) error) error {
	sent, cont := p.jobSigs, p.cont
	// fresh: a signal was forwarded, with the SIGCONT that follows it to
	// what of the tree is stopped, since the last stop was acted on.
	fresh := false
	for {
		select {
		case <-done:
			return nil
		case s := <-forward:
			if err := ends(s); err != nil {
				return err
			}
			p.forward(s)
			fresh = fresh || followedByCont(s.(syscall.Signal))
		case <-cont:
			// Continued while not stopped by job control (kill -CONT
			// after a kill -TSTP without a terminal): the command, which
			// the stop reached, is continued too.
			p.forward(syscall.SIGCONT)
		case s := <-sent:
			p.log.Debug("stop signal sent to fencerun: stopping the command first", "signal", logfield.Signal(s.(syscall.Signal)))
			if err := p.Signal(s.(syscall.Signal)); err != nil {
				p.log.Warn("could not stop the command", "signal", logfield.Signal(s.(syscall.Signal)), "error", err)
			}
		case sig := <-p.stops:
			if !p.underTerminal() {
				p.log.Debug("the command stopped; no terminal, so fencerun goes on fencing it", "signal", logfield.Signal(sig))
				continue
			}
			if sig == syscall.SIGTTIN || sig == syscall.SIGTTOU {
				// A background read or write of the terminal, right after
				// a signal came for the command: the command may have
				// stopped before it acted on the signal (Signal continues
				// only what it read as stopped), or the signal may still
				// be waiting here. Both happen when fencerun is continued
				// by bash's kill of the stopped job: the SIGTERM bash sent
				// first can reach os/signal after the SIGCONT, when
				// another thread took it (measured with the CPUs busy: in
				// 1 of 40 continues it was not there yet, in 1 of 170 not
				// a millisecond later), so suspend found none to forward,
				// continued the command, and it stopped on its read with
				// the SIGTERM not acted on: the job stayed stopped. The
				// command is continued once more instead, to act on it; a
				// second such stop stops the job.
				more, err := p.forwardWaiting(forward, ends)
				if err != nil {
					return err
				}
				if fresh || more {
					fresh = false
					p.log.Debug("the command stopped on the terminal with a signal sent to it since: continuing it to act on that first", "signal", logfield.Signal(sig))
					if err := p.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, errFinished) {
						p.log.Debug("continuing the command", "error", err)
					}
					continue
				}
			}
			fresh = false
			if err := p.suspend(sig, cont, k, forward, ends); err != nil {
				return err
			}
		}
	}
}

// subscribe hands this Process, from before the command starts and until
// just after it is reaped, the job signals sent to this process and
// SIGCONT, for JobControl (Catch catches them); those the
// caller ignored stay ignored, for the command too.
func (p *Process) subscribe() {
	p.jobSigs = make(chan os.Signal, len(jobSignals))
	p.cont = make(chan os.Signal, 1)
	reg.mu.Lock()
	reg.listeners[p] = true
	reg.mu.Unlock()
}

// unsubscribe ends subscribe. A job signal sent to this process after it
// is caught and dropped, rather than stopping it: signal.Stop would cost a
// round trip to the runtime's signal-mask thread each.
func (p *Process) unsubscribe() {
	reg.mu.Lock()
	delete(reg.listeners, p)
	reg.mu.Unlock()
}

// underTerminal reports whether this process takes part in job control: it
// has a controlling terminal, it will hear when it is continued, and its
// process group is not orphaned (the kernel discards the terminal stop
// signals sent to an orphaned group, and nobody would continue it).
func (p *Process) underTerminal() bool {
	return p.tty >= 0 && !CallerIgnored(syscall.SIGCONT) && !orphaned()
}

// suspend stops this process's group with sig after the command stopped,
// and continues the command once this process is continued and k says the
// lease is still held.
func (p *Process) suspend(sig syscall.Signal, cont <-chan os.Signal, k Keeper, forward <-chan os.Signal, ends func(os.Signal) error) error {
	p.hold(true)
	defer p.hold(false)
	k.Pause()
	// The command's group is stopped; what of the tree left it is stopped
	// too, so that nothing of it runs while nothing renews the lease.
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		p.log.Warn("could not stop all of the command's tree", "error", err)
	}
	for len(cont) > 0 {
		<-cont
	}
	p.log.Debug("the command stopped; stopping fencerun's job with it", "signal", logfield.Signal(sig))
	restore, err := stopSelf(sig)
	if err != nil {
		p.log.Warn("could not stop fencerun with its command", "signal", logfield.Signal(sig), "error", err)
	} else {
		<-cont
		restore()
	}
	if err := k.Resume(context.Background()); err != nil {
		p.log.Debug("continued, but the lease was lost meanwhile: killing the stopped command", "error", err)
		_ = p.Signal(syscall.SIGKILL)
		return err
	}
	// The signals that came with the SIGCONT (bash's kill: SIGTERM first)
	// are forwarded before the command runs again: settleSignals waits
	// for those another thread took. One later still (a thread preempted
	// in its handler past the bound) JobControl sees to if the command
	// stops on the terminal before acting on it.
	settleSignals(cont)
	if _, err := p.forwardWaiting(forward, ends); err != nil {
		return err // the run ends: the command is stopped as on any end
	}
	if inForeground(p.tty) {
		p.gaveTerminal.Store(true)
		setForeground(p.tty, p.pid, p.log) // fg: the command has the terminal again
	}
	p.hold(false)
	p.log.Debug("continued: continuing the command", "foreground", inForeground(p.tty))
	return p.Signal(syscall.SIGCONT)
}

// forwardWaiting forwards the signals waiting in forward, unless ends
// gives an error for one; cont reports whether one is of those Signal
// follows with SIGCONT.
func (p *Process) forwardWaiting(forward <-chan os.Signal, ends func(os.Signal) error) (cont bool, err error) {
	for len(forward) > 0 {
		s := <-forward
		if err := ends(s); err != nil {
			return cont, err
		}
		p.forward(s)
		cont = cont || followedByCont(s.(syscall.Signal))
	}
	return cont, nil
}

func (p *Process) forward(s os.Signal) {
	sig := s.(syscall.Signal)
	p.log.Debug("forwarding signal", "signal", logfield.Signal(sig))
	if err := p.Signal(sig); err != nil && !errors.Is(err, errFinished) {
		p.log.Debug("forwarding signal", "signal", logfield.Signal(sig), "error", err)
	}
}

// hold, while on, keeps Signal from continuing a stopped command: job
// control continues it only once the lease is confirmed.
func (p *Process) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
}

// stopped is told, by the goroutine that waits for the direct child, each
// stop of it; JobControl acts on it. Stops of the stop sweep's own (it
// freezes the tree before SIGKILL) are not job control's.
func (p *Process) stopped(sig syscall.Signal) {
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		return
	}
	select {
	case p.stops <- sig:
	default: // one is pending already
	}
}

// childInfo is the siginfo_t of waitid(2) for a child: x/sys/unix's
// Siginfo leaves the union opaque.
type childInfo struct {
	signo, errno, code, _ int32
	pid                   int32
	uid                   uint32
	status                int32
	_                     [100]byte
}

// si_code of SIGCHLD (siginfo.h).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldStopped = 5
)

func waitid(pid int, info *childInfo, options int) error {
	return unix.Waitid(unix.P_PID, pid, (*unix.Siginfo)(unsafe.Pointer(info)), options, nil)
}

// waitExit waits until the direct child has exited. WNOWAIT leaves it a
// zombie, so that its pid, which is also the process group's id, cannot
// be reused while the group is signalled. Each time it stops meanwhile,
// the stop is consumed and its signal told to stopped.
func (p *Process) waitExit(pid int) error {
	for {
		var info childInfo
		err := waitid(pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case info.code == cldExited || info.code == cldKilled || info.code == cldDumped:
			return nil
		}
		// Consumed without WEXITED, so that an exit since is left for
		// the wait above.
		var stop childInfo
		err = waitid(pid, &stop, unix.WSTOPPED|unix.WNOHANG)
		if err == nil && int(stop.pid) == pid && stop.code == cldStopped {
			p.stopped(syscall.Signal(stop.status))
		}
	}
}

// orphaned reports whether this process's group is orphaned: no process
// of it, as far as its ancestors tell, has a parent in another group of
// the same session.
func orphaned() bool {
	pgrp := unix.Getpgrp()
	mySid, err := unix.Getsid(0)
	if err != nil {
		return true
	}
	for pid := os.Getppid(); pid > 1; {
		g, err := unix.Getpgid(pid)
		if err != nil {
			return true
		}
		if g != pgrp {
			s, err := unix.Getsid(pid)
			return err != nil || s != mySid
		}
		q, err := readProc(pid)
		if err != nil {
			return true
		}
		pid = q.ppid
	}
	return true
}

// followedByCont reports whether Signal continues a stopped command after
// sig: every signal but those that stop or continue, and SIGKILL, which
// needs no help.
func followedByCont(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGCONT, syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return false
	}
	return true
}
