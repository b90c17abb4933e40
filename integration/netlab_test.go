package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencerun/fencerun/store/etcdstore/etcdtest"
)

// A netlab is three hosts, each a network namespace (fre-h0, fre-h1,
// fre-h2) with one etcd 3.4 member, joined by veth pairs to a bridge
// (fre-br0) in the test's own namespace, on 10.231.0.0/24: host i is
// 10.231.0.1i, the bridge 10.231.0.1, so the test's client reaches every
// member. A host's fencerun runs in its namespace and in a UTS namespace
// of its own (hostname fre-hI), so that it is another host to the others'
// leftovers. Faults: a host's link down, its packets dropped (iptables in
// its namespace), a member killed. Everything is removed by the test's
// cleanup, and what a failed earlier run left is removed first.
type netlab struct {
	t     *testing.T
	dir   string
	hosts []*labHost
	run   int // the cluster's generation, for its token and data
}

type labHost struct {
	name, ns, ip string
	member       *exec.Cmd
	memberDone   chan struct{}
}

const (
	labBridge = "fre-br0"
	labHosts  = 3
)

// needNetlab skips the test unless it can build a netlab: root, ip(8),
// iptables(8), etcd, etcdctl, unshare(1).
func needNetlab(t *testing.T) {
	t.Helper()
	etcdtest.Need(t)
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables", "unshare", "etcdctl", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (apt-get install iproute2 iptables util-linux etcd-client)", tool)
		}
	}
}

func newNetlab(t *testing.T) *netlab {
	t.Helper()
	needNetlab(t)
	l := &netlab{t: t, dir: t.TempDir()}
	lockNetlab(t)
	l.teardown()
	t.Cleanup(l.teardown)
	l.sh("ip", "link", "add", labBridge, "type", "bridge")
	l.sh("ip", "addr", "add", "10.231.0.1/24", "dev", labBridge)
	l.sh("ip", "link", "set", labBridge, "up")
	for i := range labHosts {
		h := &labHost{name: fmt.Sprintf("fre-h%d", i), ns: fmt.Sprintf("fre-h%d", i), ip: fmt.Sprintf("10.231.0.1%d", i)}
		veth := fmt.Sprintf("fre-v%d", i)
		l.sh("ip", "netns", "add", h.ns)
		l.sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		l.sh("ip", "link", "set", veth, "master", labBridge, "up")
		l.sh("ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		l.sh("ip", "-n", h.ns, "link", "set", "eth0", "up")
		l.sh("ip", "-n", h.ns, "link", "set", "lo", "up")
		l.hosts = append(l.hosts, h)
	}
	return l
}

// lockNetlab makes the test the only user of the lab's names on this
// machine until it ends: two test binaries (two go test runs at once)
// would tear each other's namespaces down. It waits for the other.
func lockNetlab(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "fre-netlab.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Logf("another test uses the netlab's namespaces; waiting for it")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
	}
	// Unlocked last: cleanups run in reverse, after teardown.
	t.Cleanup(func() { f.Close() })
}

// teardown kills what runs in the lab's namespaces and removes them and
// the bridge; errors are ignored (nothing there to remove).
func (l *netlab) teardown() {
	for _, h := range l.hosts {
		l.stopMember(h)
	}
	l.killAll()
	for i := range labHosts {
		ns := fmt.Sprintf("fre-h%d", i)
		exec.Command("ip", "netns", "del", ns).Run()
		exec.Command("ip", "link", "del", fmt.Sprintf("fre-v%d", i)).Run()
	}
	exec.Command("ip", "link", "del", labBridge).Run()
}

// killAll SIGKILLs every process in the hosts' namespaces.
func (l *netlab) killAll() {
	for i := range labHosts {
		out, err := exec.Command("ip", "netns", "pids", fmt.Sprintf("fre-h%d", i)).Output()
		if err != nil {
			continue
		}
		for _, p := range strings.Fields(string(out)) {
			var pid int
			fmt.Sscan(p, &pid)
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// sh runs a setup command, failing the test if it fails.
func (l *netlab) sh(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// endpoints are the members' client URLs.
func (l *netlab) endpoints() string {
	var eps []string
	for _, h := range l.hosts {
		eps = append(eps, "http://"+h.ip+":2379")
	}
	return strings.Join(eps, ",")
}

// startCluster starts a fresh cluster, one member a host, with etcd's
// default timing (heartbeat 100 ms, election 1 s), and waits until every
// member answers.
func (l *netlab) startCluster() {
	l.t.Helper()
	l.run++
	var peers []string
	for _, h := range l.hosts {
		peers = append(peers, fmt.Sprintf("%s=http://%s:2380", h.name, h.ip))
	}
	for _, h := range l.hosts {
		l.startMember(h, strings.Join(peers, ","))
	}
	for _, h := range l.hosts {
		l.waitMember(h)
	}
}

func (l *netlab) startMember(h *labHost, peers string) {
	l.t.Helper()
	data := filepath.Join(l.dir, fmt.Sprintf("%s-%d", h.name, l.run))
	logf, err := os.Create(data + ".log")
	if err != nil {
		l.t.Fatal(err)
	}
	defer logf.Close()
	url := "http://" + h.ip
	h.member = exec.Command("ip", "netns", "exec", h.ns, etcdtest.Binary(),
		"--name", h.name, "--data-dir", data,
		"--listen-client-urls", url+":2379", "--advertise-client-urls", url+":2379",
		"--listen-peer-urls", url+":2380", "--initial-advertise-peer-urls", url+":2380",
		"--initial-cluster", peers, "--initial-cluster-token", fmt.Sprintf("fre-%d-%d", os.Getpid(), l.run),
		"--initial-cluster-state", "new")
	h.member.Stdout, h.member.Stderr = logf, logf
	h.member.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.member.Start(); err != nil {
		l.t.Fatal(err)
	}
	done := make(chan struct{})
	h.memberDone = done
	go func(c *exec.Cmd) { c.Wait(); close(done) }(h.member)
}

func (l *netlab) waitMember(h *labHost) {
	l.t.Helper()
	cl := l.client(h.ip)
	defer cl.Close()
	err := waitFor(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cl.Get(ctx, "health")
		return err == nil
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(l.dir, fmt.Sprintf("%s-%d.log", h.name, l.run)))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		l.t.Fatalf("member %s never answered:\n%s", h.name, log)
	}
}

// stopMember kills a host's member and waits until it is reaped.
func (l *netlab) stopMember(h *labHost) {
	if h.member == nil {
		return
	}
	h.member.Process.Kill()
	<-h.memberDone
	h.member = nil
}

// stopCluster kills every member.
func (l *netlab) stopCluster() {
	for _, h := range l.hosts {
		l.stopMember(h)
	}
}

// client is a client of the members at ips (all when none are named),
// from the test's namespace.
func (l *netlab) client(ips ...string) *clientv3.Client {
	l.t.Helper()
	var eps []string
	for _, ip := range ips {
		eps = append(eps, "http://"+ip+":2379")
	}
	if len(eps) == 0 {
		eps = strings.Split(l.endpoints(), ",")
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		l.t.Fatal(err)
	}
	return cl
}

// leader is the index of the host whose member leads, as the members
// other than skip agree.
func (l *netlab) leader(skip int) int {
	l.t.Helper()
	idx := -1
	err := waitFor(func() bool {
		ids := map[uint64]int{}
		var lead uint64
		agree := true
		for i, h := range l.hosts {
			if i == skip || h.member == nil {
				continue
			}
			cl := l.client(h.ip)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cl.Status(ctx, "http://"+h.ip+":2379")
			cancel()
			cl.Close()
			if err != nil || st.Leader == 0 {
				return false
			}
			ids[st.Header.MemberId] = i
			if lead != 0 && lead != st.Leader {
				agree = false
			}
			lead = st.Leader
		}
		i, ok := ids[lead]
		idx = i
		return agree && ok
	})
	if err != nil {
		l.t.Fatal("the members never agreed on a leader")
	}
	return idx
}

// memberID is the etcd member id of host i, in hex as etcdctl takes it.
func (l *netlab) memberID(i int) string {
	l.t.Helper()
	cl := l.client(l.hosts[i].ip)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := cl.Status(ctx, "http://"+l.hosts[i].ip+":2379")
	if err != nil {
		l.t.Fatal(err)
	}
	return fmt.Sprintf("%x", st.Header.MemberId)
}

// onHost is a command run on host i: in its network namespace and a UTS
// namespace named after it.
func (l *netlab) onHost(i int, env []string, args ...string) *exec.Cmd {
	h := l.hosts[i]
	c := exec.Command("ip", append([]string{"netns", "exec", h.ns, "unshare", "-u", "sh", "-c",
		`hostname "$0" && exec "$@"`, h.name}, args...)...)
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return c
}

// A fault cuts host i off the others, or takes a member away.
type fault string

const (
	linkDown   fault = "link-down"   // ip link set eth0 down in the host's namespace
	dropAll    fault = "packet-drop" // iptables DROP of everything in and out of eth0
	leaderKill fault = "leader-kill" // SIGKILL of the leader's member
	leaderMove fault = "leader-move" // etcdctl move-leader to another member
)

// cut applies a partition fault to host i.
func (l *netlab) cut(f fault, i int) {
	l.t.Helper()
	ns := l.hosts[i].ns
	switch f {
	case linkDown:
		l.sh("ip", "-n", ns, "link", "set", "eth0", "down")
	case dropAll:
		l.sh("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-i", "eth0", "-j", "DROP")
		l.sh("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "DROP")
	default:
		l.t.Fatalf("cut: %s is not a partition", f)
	}
}

// heal undoes cut.
func (l *netlab) heal(f fault, i int) {
	l.t.Helper()
	ns := l.hosts[i].ns
	switch f {
	case linkDown:
		l.sh("ip", "-n", ns, "link", "set", "eth0", "up")
	case dropAll:
		l.sh("ip", "netns", "exec", ns, "iptables", "-F")
	}
}

// moveLeader asks the leader (host from) to hand leadership to host to.
func (l *netlab) moveLeader(from, to int) {
	l.t.Helper()
	c := exec.Command("etcdctl", "--endpoints", "http://"+l.hosts[from].ip+":2379", "move-leader", l.memberID(to))
	c.Env = append(os.Environ(), "ETCDCTL_API=3")
	if out, err := c.CombinedOutput(); err != nil {
		l.t.Fatalf("etcdctl move-leader: %v\n%s", err, out)
	}
}

// labWitnessScript is the command every holder runs: it takes a flock on
// dir/resource without waiting (a second command running beside it
// finds it taken: an overlap), appends "start NAME TIME" (or "overlap
// NAME TIME") to dir/witness, then "beat NAME TIME" every 50 ms, with
// the wall clock in nanoseconds. Every line of a holder is written
// before its tree is dead, so with no overlap a holder's last line comes
// before the next holder's start.
const labWitnessScript = `dir=$1; me=$2
exec 9>"$dir/resource"
if flock -n 9; then echo "start $me $(date +%s%N)" >> "$dir/witness"; else echo "overlap $me $(date +%s%N)" >> "$dir/witness"; fi
while :; do echo "beat $me $(date +%s%N)" >> "$dir/witness"; sleep 0.05; done
`

// labLine is one line of the witness log.
type labLine struct {
	what, who string
	at        time.Time
}

func readLabWitness(t *testing.T, dir string) []labLine {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "witness"))
	var out []labLine
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var ns int64
		fmt.Sscan(f[2], &ns)
		out = append(out, labLine{what: f[0], who: f[1], at: time.Unix(0, ns)})
	}
	return out
}

// labWitnessed finds the first start of who in the witness log, and the last
// line of anyone else before it; overlap is whether another's line comes
// after who's start, or who's command found the resource taken.
func labWitnessed(lines []labLine, who string) (start, lastOther time.Time, overlap bool) {
	for _, w := range lines {
		switch {
		case w.who == who && w.what == "overlap":
			overlap = true
			if start.IsZero() {
				start = w.at
			}
		case w.who == who && w.what == "start" && start.IsZero():
			start = w.at
		case w.who != who && w.at.After(lastOther):
			lastOther = w.at
		}
	}
	if !start.IsZero() && lastOther.After(start) {
		overlap = true
	}
	return start, lastOther, overlap
}

// labJSON is a value as JSON, for logs.
func labJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
