package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Issue 26, point 11: a descriptor passed on as 60 under `ulimit -n 61`
// leaves the fork no number for its error pipe, and every start failed
// with EBADF as a command that cannot be executed (126). The start now
// fails as fencerun's own failure (125 in the helper, as in fencerun),
// naming the limit, before it forks.
func TestInheritedDescriptorAboveTheLimit(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `exec 60>/dev/null; ulimit -n 61; exec "$0" run true`, self)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(out), "limit (ulimit -n) is 61") {
		t.Errorf("run with descriptor 60 open under ulimit -n 61: %v, %q; want exit 125 naming the limit", err, out)
	}
	cmd = exec.Command("bash", "-c", `exec 58>/dev/null; ulimit -n 61; exec "$0" run true`, self)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("run with descriptor 58 open under ulimit -n 61: %v, %q; want it started", err, out)
	}
}
