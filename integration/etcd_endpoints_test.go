package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// Every form of an endpoint that etcdctl --endpoints dials, fencerun
// --etcd dials too (59cf2e5 refuses only what no client could dial): the
// scheme in any case, a bare HOST:PORT, a trailing slash, a trailing
// comma, spaces around the commas. Each is checked with etcdctl first, so
// the test says what etcdctl takes, against the same real server.
func TestEtcdTakesTheEndpointsEtcdctlTakes(t *testing.T) {
	t.Parallel()
	needEtcdctl(t)
	c := etcdtest.Start(t, etcdtest.Options{})
	url := c.Endpoints() // http://127.0.0.1:PORT
	hostport := strings.TrimPrefix(url, "http://")
	for _, ep := range []string{
		url,
		"HTTP://" + hostport,
		"Http://" + hostport,
		hostport,
		url + "/",
		url + ",",
		" " + url + " , ",
	} {
		if out, err := exec.Command("etcdctl", "--endpoints", ep, "--dial-timeout", "1m", "get", "k").CombinedOutput(); err != nil {
			t.Errorf("etcdctl --endpoints %q: %v\n%s", ep, err, out)
			continue
		}
		run := onEtcd(t, ep, "--dial-timeout", "1m", "run", "--key", "k", "--", "echo", "ran")
		out, err := run.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ran\n") {
			t.Errorf("fencerun --etcd %q run: %v, want exit 0, as etcdctl takes it\n%s", ep, err, out)
		}
	}
}
