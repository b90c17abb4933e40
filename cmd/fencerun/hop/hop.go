// Package hop is the one place that hands an etcd command line from
// fencerun to fencerun-etcd: from an init function, when etcdhop.Wanted
// says the command line selects etcd, so that fencerun's own packages (the
// logger, kong, the supervisor) never initialise on the way to the helper.
// Only cmd/fencerun imports it; fencerun-etcd, which has the backend, must
// not.
//
// It guarantees that the process is replaced by the helper, or that Err
// says why not; cmd/internal/cli reports Err (exit 125) without parsing
// the command line.
package hop

import (
	"os"

	"github.com/fencerun/fencerun/cmd/internal/etcdhop"
)

// Err is why the hop that the command line wanted failed (the helper is
// missing, or cannot be executed); nil when no hop was wanted.
var Err error

func init() {
	if etcdhop.Wanted(os.Args[1:]) {
		Err = etcdhop.Exec(os.Args[1:]) // returns only on failure
	}
}
