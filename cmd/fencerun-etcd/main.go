//go:build linux

// Command fencerun-etcd is fencerun with the etcd backend linked in: the
// same command line (package cmd/internal/cli), which fencerun execs when
// --etcd or FENCERUN_ETCD is given. It is a binary of its own because the
// etcd client's package initialisation costs every process that links it
// about 3 ms of start-up, which the file backend must not pay (P1).
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
	"github.com/fencerun/fencerun/supervisor"
)

func main() {
	code := cli.Main(os.Args[1:], cli.Etcd{Open: open, MinTTL: etcdstore.MinTTL})
	os.Exit(code)
}

// open opens the etcd backend the flags name. TLS is used when a
// certificate flag is given or an endpoint is https:// or unixs://.
func open(f cli.EtcdFlags, log hclog.Logger) (store.Store, error) {
	o := etcdstore.Options{Endpoints: f.Endpoints(), DialTimeout: f.DialTimeout, Logger: log, Running: supervisor.CountTrees,
		CACert: f.Cacert, Cert: f.Cert, Key: f.KeyFile}
	o.Username, o.Password = f.Credentials()
	if f.Cacert != "" || f.Cert != "" || f.KeyFile != "" || wantsTLS(f.Etcd) {
		cfg, err := etcdstore.TLSConfig(f.Cacert, f.Cert, f.KeyFile)
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	s, err := etcdstore.Open(o)
	if err != nil {
		return nil, err
	}
	return s, nil
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
