// Package hop execs fencerun-etcd from an init function, when the command
// line selects etcd, so that fencerun's own packages (the logger, kong,
// the supervisor) never initialise on the way to the helper: the hop costs
// a Go runtime start and little more (P7). Only cmd/fencerun imports it;
// fencerun-etcd, which has the backend, must not.
//
// It guarantees nothing on failure but to return: a helper that cannot be
// found or exec'd is left to cmd/internal/cli, which says so (exit 125).
package hop

import (
	"os"

	"github.com/fencerun/fencerun/cmd/internal/etcdhop"
)

func init() {
	if !etcdhop.Wanted(os.Args[1:]) {
		return
	}
	path, err := etcdhop.Find()
	if err != nil {
		return
	}
	_ = etcdhop.ExecPath(path, os.Args[1:])
}
