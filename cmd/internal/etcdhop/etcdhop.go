// Package etcdhop is how the fencerun binary hands a command line that
// selects etcd to fencerun-etcd, the binary that links the etcd client
// (issue 11; P1 forbids that client's start-up cost on the file backend).
//
// It guarantees that Exec replaces the process with the helper found
// beside fencerun's own executable, else in PATH, with the same arguments
// and environment, and that Wanted reads only the arguments and
// FENCERUN_ETCD. It imports nothing but the standard library and has no
// package initialisation, so that cmd/fencerun/hop, the one caller that
// decides and makes the hop, can exec from an init function before the rest
// of fencerun's packages initialise. It does not
// check the command line: fencerun-etcd parses it, and says what is wrong.
package etcdhop

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Helper is the binary that carries the etcd backend.
const Helper = "fencerun-etcd"

// Wanted says, before the command line is parsed, whether it selects
// etcd: FENCERUN_ETCD, or --etcd among fencerun's own arguments (before
// the command's "--"). A false positive only costs an exec: fencerun-etcd
// parses the same arguments and has the file backend too.
func Wanted(args []string) bool {
	if os.Getenv("FENCERUN_ETCD") != "" {
		return true
	}
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--etcd" || strings.HasPrefix(a, "--etcd=") {
			return true
		}
	}
	return false
}

// Exec replaces this process by the helper with the same arguments and
// environment. It returns only on failure, saying how to install the
// helper when it is missing.
func Exec(args []string) error {
	path, err := Find()
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("--etcd: exec %s: %w", path, err)
}

// Find looks for the helper beside fencerun's own executable, then in PATH.
func Find() (string, error) {
	self, err := os.Executable()
	if err == nil {
		beside := filepath.Join(filepath.Dir(self), Helper)
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(Helper); err == nil {
		return p, nil
	} else if !errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("--etcd: %s: %w", Helper, err)
	}
	where := "beside fencerun"
	if self != "" {
		where = "in " + filepath.Dir(self)
	}
	return "", fmt.Errorf("--etcd needs the etcd backend, which is the separate binary %s; it is neither %s nor in PATH. "+
		"Install it beside fencerun: from a clone of fencerun, go install ./cmd/... (both binaries), or just build (bin/%s)",
		Helper, where, Helper)
}
