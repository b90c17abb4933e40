package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// S10 on etcd: a waiter whose predecessor is a fencerun of this host that
// was SIGKILLed loses no time to the dead one's lease. Before, the next
// waiter waited for that lease to expire (up to its TTL: 28.5-28.9 s at
// the default 30 s), so a waiter with -w shorter than the TTL gave up.
// Each dead contender here holds a 60 s lease; the waiter behind it gives
// up after 20 s: it must run.
func TestEtcdDeadContenderAheadLosesItsPlace(t *testing.T) {
	for _, dead := range []string{"waiter", "holder"} {
		t.Run(dead, func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{})
			eps, cl := c.Endpoints(), c.Client()
			dir := t.TempDir()
			stop := filepath.Join(dir, "stop")
			holder := onEtcd(t, eps, "run", "--key", "da", "--ttl", "60", "--", "sh", "-c",
				"while [ ! -e "+stop+" ]; do sleep 0.05; done")
			startLogged(t, holder, dir, "holder")
			waitContenders(t, cl, "da", 1)
			var victim = holder
			if dead == "waiter" {
				victim = onEtcd(t, eps, "run", "--key", "da", "--ttl", "60", "--", "true")
				startLogged(t, victim, dir, "victim")
				waitContenders(t, cl, "da", 2)
			}
			ran := filepath.Join(dir, "ran")
			next := onEtcd(t, eps, "run", "--key", "da", "-w", "20s", "--", "touch", ran)
			log := startLogged(t, next, dir, "next")
			waitContenders(t, cl, "da", map[string]int{"waiter": 3, "holder": 2}[dead])
			victim.Process.Kill()
			exitOf(t, victim)
			os.WriteFile(stop, nil, 0o600)
			if code := exitOf(t, next); code != 0 {
				data, _ := os.ReadFile(log)
				t.Fatalf("the waiter behind a dead %s exited %d, want 0 (it waited out the dead one's lease)\n%s", dead, code, data)
			}
			if _, err := os.Stat(ran); err != nil {
				t.Errorf("the waiter's command did not run: %v", err)
			}
		})
	}
}
