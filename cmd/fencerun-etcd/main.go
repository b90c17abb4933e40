//go:build linux

// Command fencerun-etcd is fencerun with the etcd backend linked in: the
// same command line (package cmd/internal/cli), which fencerun execs when
// --etcd or FENCERUN_ETCD is given. It is a binary of its own because the
// etcd client's package initialisation costs every process that links it
// about 3 ms of start-up, which the file backend must not pay (P1).
//
// It connects to the cluster its arguments and environment name while
// kong parses them (P7), and uses that connection only if the parse names
// the same cluster, credentials and TLS files.
//
//go:debug updatemaxprocs=0
package main

import (
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/cmd/internal/cli"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore"
)

func main() {
	var d *dialed
	if f, ok := cli.EarlyEtcdFlags(os.Args[1:]); ok {
		d = dial(f)
	}
	code := cli.Main(os.Args[1:], d.open)
	os.Exit(code)
}

// dialed is a store opened before the command line was parsed, from the
// flags guessed then.
type dialed struct {
	flags cli.EtcdFlags
	done  chan struct{}
	s     *etcdstore.Store
	err   error
}

func dial(f cli.EtcdFlags) *dialed {
	d := &dialed{flags: f, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.s, d.err = open(f)
		if d.err == nil {
			d.s.Connect()
		}
	}()
	// On the second core, while kong parses: what protobuf would build at
	// the first message of each type, on the run's critical path.
	go func() {
		etcdstore.Warm()
	}()
	return d
}

// open is the early store when f is what it was opened with, else a new
// one (and the early one is closed).
func (d *dialed) open(f cli.EtcdFlags, log hclog.Logger) (store.Store, error) {
	if d == nil {
		return withLogger(open(f))(log)
	}
	<-d.done
	if f == d.flags {
		return withLogger(d.s, d.err)(log)
	}
	if d.s != nil {
		d.s.Close()
	}
	return withLogger(open(f))(log)
}

func withLogger(s *etcdstore.Store, err error) func(hclog.Logger) (store.Store, error) {
	return func(log hclog.Logger) (store.Store, error) {
		if err != nil {
			return nil, err
		}
		s.SetLogger(log)
		return s, nil
	}
}

// open opens the etcd backend the flags name. TLS is used when a
// certificate flag is given or an endpoint is https:// or unixs://.
func open(f cli.EtcdFlags) (*etcdstore.Store, error) {
	o := etcdstore.Options{Endpoints: f.Endpoints(), DialTimeout: f.DialTimeout}
	o.Username, o.Password = f.Credentials()
	if f.Cacert != "" || f.Cert != "" || f.KeyFile != "" || wantsTLS(f.Etcd) {
		cfg, err := etcdstore.TLSConfig(f.Cacert, f.Cert, f.KeyFile)
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	s, err := etcdstore.Open(o)
	return s, err
}

// wantsTLS reports whether an endpoint of the --etcd list asks for TLS:
// https:// or unixs:, in any case, as cmd/internal/cli's check accepts the
// schemes and the client reads them (an HTTPS:// endpoint without a
// certificate flag would otherwise get the client's default TLS rather
// than ours, with its minimum version).
func wantsTLS(endpoints string) bool {
	l := strings.ToLower(endpoints)
	return strings.Contains(l, "https://") || strings.Contains(l, "unixs:")
}
