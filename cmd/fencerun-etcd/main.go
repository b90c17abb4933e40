//go:build fencerun_etcd

package main

import (
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/etcdstore"
)

func init() { openEtcd = openEtcdStore }

// openEtcdStore opens the etcd backend the flags name. TLS is used when a
// certificate flag is given or an endpoint is https://.
func openEtcdStore(f EtcdFlags, log hclog.Logger) (store.Store, error) {
	eps := f.Endpoints()
	o := etcdstore.Options{Endpoints: eps, DialTimeout: f.DialTimeout, Logger: log}
	o.Username, o.Password = f.Credentials()
	if f.Cacert != "" || f.Cert != "" || f.KeyFile != "" || strings.Contains(f.Etcd, "https://") {
		cfg, err := etcdstore.TLSConfig(f.Cacert, f.Cert, f.KeyFile)
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	return etcdstore.Open(o)
}
