// Command fencerun-etcd is fencerun with the etcd backend linked in: the
// same command line (package internal/cli), which fencerun execs when
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

	"github.com/fencerun/fencerun/internal/cli"
	"github.com/fencerun/fencerun/internal/stamps"
	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore"
)

func main() {
	stamps.Mark("etcd.main")
	code := cli.Main(os.Args[1:], open)
	stamps.Mark("exit")
	stamps.Dump()
	os.Exit(code)
}

// open opens the etcd backend the flags name. TLS is used when a
// certificate flag is given or an endpoint is https://.
func open(f cli.EtcdFlags, log hclog.Logger) (store.Store, error) {
	o := etcdstore.Options{Endpoints: f.Endpoints(), DialTimeout: f.DialTimeout, Logger: log}
	o.Username, o.Password = f.Credentials()
	if f.Cacert != "" || f.Cert != "" || f.KeyFile != "" || strings.Contains(f.Etcd, "https://") {
		cfg, err := etcdstore.TLSConfig(f.Cacert, f.Cert, f.KeyFile)
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	s, err := etcdstore.Open(o)
	stamps.Mark("etcd.open")
	return s, err
}
