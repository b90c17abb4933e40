package cli

import (
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/fencerun/fencerun/fenced"
	"github.com/fencerun/fencerun/internal/sdnotify"
)

// notify is the run's side of systemd's notify protocol (N1): nil when
// NOTIFY_SOCKET is unset. With --ready command it binds the command's own
// notify socket, beside the tick socket and named as tick sockets are,
// so that prune's sweep of dead runs' sockets takes it too; the caller
// closes it.
func (r *RunCmd) notify(g *Globals) (*fenced.Notify, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil, nil
	}
	n := &fenced.Notify{
		Send:     func(state string) error { return sdnotify.Send(addr, state) },
		Watchdog: sdnotify.Watchdog(os.Getenv),
	}
	if r.Ready != "command" {
		return n, nil
	}
	dir, err := g.tickDir()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	rand.Read(b[:])
	l, err := sdnotify.Listen(dir, "t-"+hex.EncodeToString(b[:]))
	if err != nil {
		return nil, fail(exitFailed, "%v", err)
	}
	n.Relay, r.relayAddr = l, l.Addr()
	return n, nil
}

// notifyEnv is the command's environment as the notify protocol has it:
// with --ready command, the relay's NOTIFY_SOCKET and WATCHDOG_USEC; with
// --ready start, neither (fencerun alone speaks to the service manager).
// Without NOTIFY_SOCKET, env as it is.
func (r *RunCmd) notifyEnv(env []string) []string {
	if r.notified == nil {
		return env
	}
	return sdnotify.Env(env, r.relayAddr, r.notified.Watchdog)
}

// waitStatus sends the waiting line as the unit's STATUS, when it changed.
func (r *RunCmd) waitStatus(line string) {
	if r.notified != nil && line != r.saidWaiting {
		r.saidWaiting = line
		_ = r.notified.Send("STATUS=" + line)
	}
}
