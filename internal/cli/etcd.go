package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/internal/stamps"
	"github.com/fencerun/fencerun/store"
)

// EtcdFlags are the etcd backend's global flags, named and read as
// etcdctl's (contract: global flags). ETCDCTL_* variables fill what FENCERUN_*
// leave unset; only --etcd (FENCERUN_ETCD) selects etcd, never
// ETCDCTL_ENDPOINTS.
type EtcdFlags struct {
	Etcd        string        `placeholder:"URLS" help:"Comma-separated etcd endpoints; when set, the etcd backend is used (by the fencerun-etcd helper binary, found beside fencerun or in PATH)."`
	Cacert      string        `placeholder:"FILE" env:"FENCERUN_CACERT,ETCDCTL_CACERT" help:"etcd: verify the servers' certificates with the CA bundle in FILE (etcdctl --cacert)."`
	Cert        string        `placeholder:"FILE" env:"FENCERUN_CERT,ETCDCTL_CERT" help:"etcd: identify with the client certificate in FILE (etcdctl --cert)."`
	KeyFile     string        `placeholder:"FILE" env:"FENCERUN_KEY_FILE,ETCDCTL_KEY" help:"etcd: the client certificate's private key (etcdctl --key; here --key names the lease)."`
	User        string        `placeholder:"NAME[:PASSWORD]" env:"FENCERUN_USER,ETCDCTL_USER" help:"etcd: user name, or name:password as etcdctl takes it."`
	Password    string        `placeholder:"TEXT" env:"FENCERUN_PASSWORD,ETCDCTL_PASSWORD" help:"etcd: the user's password."`
	DialTimeout time.Duration `default:"2s" env:"FENCERUN_DIAL_TIMEOUT,ETCDCTL_DIAL_TIMEOUT" help:"etcd: how long to wait for the cluster before giving up (exit 125)."`
}

// Credentials are the user and password, split from NAME:PASSWORD when no
// password is given apart, as etcdctl does.
func (f EtcdFlags) Credentials() (string, string) {
	if f.Password == "" {
		if name, pw, ok := strings.Cut(f.User, ":"); ok {
			return name, pw
		}
	}
	return f.User, f.Password
}

// Endpoints are the --etcd URLs.
func (f EtcdFlags) Endpoints() []string {
	var eps []string
	for _, ep := range strings.Split(f.Etcd, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// EtcdOpener opens the etcd backend. Only the binary that links the etcd
// client has one (cmd/fencerun-etcd); fencerun execs that binary instead,
// so that its own start-up does not pay for the client (P1).
type EtcdOpener func(f EtcdFlags, log hclog.Logger) (store.Store, error)

// etcdMinTTL is etcd's shortest lease; its TTLs are whole seconds (E5).
const etcdMinTTL = 2 * time.Second

// checkEtcd refuses what the etcd backend cannot do and rounds --ttl up to
// whole seconds, before anything is created anywhere.
func (c *CLI) checkEtcd(kctx *kong.Context) error {
	if len(c.Endpoints()) == 0 {
		return usage("--etcd %q names no endpoint", c.Etcd)
	}
	if c.Run.Resident != "" || c.Status.Resident != "" {
		return usage("--resident is a role on this host's files; it cannot be held on etcd (--etcd %s)", c.Etcd)
	}
	if strings.HasPrefix(kctx.Command(), "run") {
		if c.Run.TTL < etcdMinTTL {
			return usage("--ttl %v is under etcd's minimum lease of %v", c.Run.TTL, etcdMinTTL)
		}
		if r := c.Run.TTL % time.Second; r != 0 {
			c.Run.TTL += time.Second - r // etcd leases are whole seconds: round up
		}
	}
	return nil
}

// wantsEtcd says, before the command line is parsed, whether it selects
// etcd: FENCERUN_ETCD, or --etcd among fencerun's own arguments (before
// the command's "--"). A false positive only costs an exec: fencerun-etcd
// parses the same arguments and has the file backend too.
func wantsEtcd(args []string) bool {
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

// execEtcd replaces this process by fencerun-etcd with the same arguments
// and environment. It returns only on failure.
func execEtcd(args []string) error {
	path, err := findEtcdHelper()
	if err != nil {
		return err
	}
	stamps.Mark("exec")
	stamps.Dump()
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("--etcd: exec %s: %w", path, err)
}

// etcdHelper is the binary that carries the etcd backend.
const etcdHelper = "fencerun-etcd"

// findEtcdHelper looks beside fencerun's own executable, then in PATH.
func findEtcdHelper() (string, error) {
	self, err := os.Executable()
	if err == nil {
		beside := filepath.Join(filepath.Dir(self), etcdHelper)
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(etcdHelper); err == nil {
		return p, nil
	} else if !errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("--etcd: %s: %w", etcdHelper, err)
	}
	where := "beside fencerun"
	if self != "" {
		where = "in " + filepath.Dir(self)
	}
	return "", fmt.Errorf("--etcd needs the etcd backend, which is the separate binary %s; it is neither %s nor in PATH. "+
		"Install it beside fencerun: go install github.com/fencerun/fencerun/cmd/fencerun-etcd@latest, or just build (bin/%s), or the release archive's %s",
		etcdHelper, where, etcdHelper, etcdHelper)
}
