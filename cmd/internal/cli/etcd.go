package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"

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
	DialTimeout time.Duration `default:"2s" env:"FENCERUN_DIAL_TIMEOUT,ETCDCTL_DIAL_TIMEOUT" help:"etcd: how long to wait for the cluster before giving up (exit 125); more than 0."`
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

// Etcd is the etcd backend as a binary has it. Only the binary that links
// the etcd client opens it (cmd/fencerun-etcd); fencerun hands an etcd
// command line to that binary instead (cmd/fencerun/hop, the one place
// that decides it), so that its own start-up does not pay for the client
// (P1).
type Etcd struct {
	// Open opens the backend; nil in a binary without it.
	Open func(f EtcdFlags, log hclog.Logger) (store.Store, error)
	// MinTTL is the backend's shortest lease (etcdstore.MinTTL); its
	// TTLs are whole seconds (E5).
	MinTTL time.Duration
	// HopFailed is why a binary without the backend could not hand the
	// command line to fencerun-etcd: set only when the hop was wanted.
	HopFailed error
}

// checkEtcd refuses what the etcd backend cannot do and rounds --ttl up to
// whole seconds, before anything is created anywhere.
func (c *CLI) checkEtcd(kctx *kong.Context) error {
	if len(c.Endpoints()) == 0 {
		return usage("--etcd %q names no endpoint", c.Etcd)
	}
	if err := c.check(); err != nil {
		// Named as the user gave it: a variable exported for etcdctl
		// is found faster by its own name.
		var bad *badEtcdFlag
		if errors.As(err, &bad) {
			return usage("%s: %s", origin(kctx, bad.flag, bad.value), bad.why)
		}
		return usage("%v", err)
	}
	if c.Run.Resident != "" || c.Status.Resident != "" {
		return usage("--resident is a role on this host's files; it cannot be held on etcd (--etcd %s)", c.Etcd)
	}
	if strings.HasPrefix(kctx.Command(), "run") {
		if c.Run.TTL < etcdBackend.MinTTL {
			return usage("--ttl %v is under etcd's minimum lease of %v", c.Run.TTL, etcdBackend.MinTTL)
		}
		if r := c.Run.TTL % time.Second; r != 0 {
			c.Run.TTL += time.Second - r // etcd leases are whole seconds: round up
		}
	}
	return nil
}

// badEtcdFlag is an etcd flag's value that no cluster could be reached
// with: refused before anything is dialled, instead of after
// --dial-timeout (E6 names the endpoint and the cause; a malformed one
// is known at once).
type badEtcdFlag struct {
	flag, value, why string
}

func (e *badEtcdFlag) Error() string { return fmt.Sprintf("--%s %s: %s", e.flag, e.value, e.why) }

// check refuses a --dial-timeout that is not positive and an endpoint
// the etcd client cannot dial whatever the network does. The client
// would take 0 for its own 2 s default, and wait out the whole timeout on
// "notaurl" before naming its missing port.
func (f EtcdFlags) check() error {
	if f.DialTimeout <= 0 {
		return &badEtcdFlag{"dial-timeout", f.DialTimeout.String(), "must be more than 0 (how long to wait for the cluster before exit 125)"}
	}
	for _, ep := range f.Endpoints() {
		if err := checkEndpoint(ep); err != nil {
			return &badEtcdFlag{"etcd", f.Etcd, fmt.Sprintf("endpoint %q: %v (an endpoint is http://HOST:PORT, https://HOST:PORT, HOST:PORT or unix://PATH, as etcdctl --endpoints takes them)", ep, err)}
		}
	}
	return nil
}

// checkEndpoint says what makes ep undialable, as the etcd client reads
// endpoints (client/v3/internal/endpoint): unix:PATH and unixs:PATH (also
// with //), http:// and https:// URLs, whose host is dialled (schemes in
// any case), and a bare HOST:PORT. Anything else it hands to the dialler
// as is, which fails.
func checkEndpoint(ep string) error {
	for _, p := range []string{"unixs://", "unix://", "unixs:", "unix:"} {
		// In any case, as the client dials it (UNIX:///run/etcd.sock).
		if len(ep) >= len(p) && strings.EqualFold(ep[:len(p)], p) {
			if ep[len(p):] == "" {
				return errors.New("names no socket path")
			}
			return nil
		}
	}
	hostport := ep
	if scheme, _, ok := strings.Cut(ep, "://"); ok {
		// The client reads the scheme as url.Parse does, in any case
		// (HTTP://h:2379 dials h:2379, as etcdctl dials it).
		if s := strings.ToLower(scheme); s != "http" && s != "https" {
			return fmt.Errorf("scheme %q is not one etcd serves (http, https, unix, unixs)", scheme)
		}
		u, err := url.Parse(ep)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return err
		}
		hostport = u.Host
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// origin names where the flag name's value came from: "--name value"
// when it was typed or left to its default, else "VARIABLE=value" of the
// first of its variables that is set.
func origin(kctx *kong.Context, name, value string) string {
	if !typed(kctx, name) {
		for _, f := range kctx.Flags() {
			if f.Name != name {
				continue
			}
			for _, env := range f.Envs {
				if _, ok := os.LookupEnv(env); ok {
					return env + "=" + value
				}
			}
		}
	}
	return "--" + name + " " + value
}
