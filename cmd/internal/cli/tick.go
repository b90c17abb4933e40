package cli

import (
	"context"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/ticksock"
)

// TickCmd is `fencerun tick`.
type TickCmd struct{}

// Help explains where tick works.
func (TickCmd) Help() string {
	return "Run this from inside a command that fencerun runs (it reaches the holder through FENCERUN_TICK). The holder stamps the tick as the lease's last tick; with --stuck-after, a command that ticked once and then stopped ticking for that long is stopped (exit 78). A tick from anywhere else is refused with exit 125."
}

// Run sends one tick.
func (TickCmd) Run(ctx context.Context) error {
	addr := os.Getenv("FENCERUN_TICK")
	if addr == "" {
		return fail(exitFailed, "tick works only inside a command that fencerun runs: FENCERUN_TICK is not set")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ticksock.Send(ctx, addr); err != nil {
		return fail(exitFailed, "%v", err)
	}
	return nil
}

// listenTicks opens the holder's tick socket in the state root's private
// tick directory (a path socket: reached from any network namespace, and
// only by the store's users), creating the root as run does anyway.
func (g *Globals) listenTicks(log hclog.Logger) (*ticksock.Server, error) {
	dir, err := g.tickDir()
	if err != nil {
		return nil, err
	}
	ticks, err := ticksock.Listen(dir, log)
	if err != nil {
		return nil, fail(exitFailed, "%v", err)
	}
	return ticks, nil
}

// tickDir is the state root's private directory for the sockets a run
// gives its command: the tick socket, and the notify relay's (N1).
func (g *Globals) tickDir() (string, error) {
	backend, err := g.openStore(true)
	if err != nil {
		return "", err
	}
	fs, ok := backend.(interface{ TickDir() (string, error) })
	if !ok {
		return "", fail(exitFailed, "this backend has no directory for tick sockets")
	}
	dir, err := fs.TickDir()
	if err != nil {
		return "", fail(exitFailed, "%v", err)
	}
	return dir, nil
}
