// Package etcdtest starts real etcd server processes (/usr/bin/etcd, or
// $FENCERUN_TEST_ETCD) for tests, and for the bench (StartServer): one member or several, on free loopback
// ports, in the test's temporary directory, optionally with TLS, and lets a
// test stop, pause, resume and kill members. Tests that need it skip when
// no etcd binary is installed unless FENCERUN_REQUIRE_ETCD is set (CI sets
// it), so a missing server fails CI instead of passing quietly.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Options configure a cluster.
type Options struct {
	Members int    // 0 means 1
	Certs   *Certs // serve clients over TLS with these
	// QuotaBytes is --quota-backend-bytes (0: etcd's default).
	QuotaBytes int64
}

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	Members []*Member
	certs   *Certs
}

// Member is one etcd server process.
type Member struct {
	Name   string
	Client string // client URL
	args   []string
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
}

// Binary is the etcd server the tests run, or "" if none is installed.
func Binary() string {
	if b := os.Getenv("FENCERUN_TEST_ETCD"); b != "" {
		return b
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return ""
}

// Need skips the test when no etcd server is installed, unless
// FENCERUN_REQUIRE_ETCD is set, when it fails it.
func Need(t testing.TB) {
	t.Helper()
	if Binary() != "" {
		return
	}
	if os.Getenv("FENCERUN_REQUIRE_ETCD") != "" {
		t.Fatal("no etcd server installed (apt-get install etcd-server etcd-client), and FENCERUN_REQUIRE_ETCD is set")
	}
	t.Skip("no etcd server installed (apt-get install etcd-server etcd-client)")
}

// Start starts a cluster and waits until it answers. It is killed by the
// test's cleanup.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	c, err := launch(t.TempDir, o)
	if c != nil {
		t.Cleanup(c.kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	return c
}

// Server is a one-member etcd started outside a test, by bench/: the
// same server and flags the tests run, in dir.
type Server struct {
	c *Cluster
}

// StartServer starts a one-member etcd in dir and waits until it
// answers; Stop kills it.
func StartServer(dir string) (*Server, error) {
	if Binary() == "" {
		return nil, errors.New("no etcd server installed (apt-get install etcd-server etcd-client)")
	}
	n := 0
	c, err := launch(func() string {
		n++
		return filepath.Join(dir, fmt.Sprintf("m%d", n))
	}, Options{})
	if err != nil {
		if c != nil {
			c.kill()
		}
		return nil, err
	}
	return &Server{c: c}, nil
}

// URL is the server's client URL.
func (s *Server) URL() string { return s.c.Endpoints() }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.c.Members[0].Pid() }

// Stop kills the server and waits until it is reaped.
func (s *Server) Stop() { s.c.kill() }

// launch starts the members, each in a directory newDir makes, and waits
// until every one answers. On an error the members started so far are
// in the Cluster it returns, for the caller to kill.
func launch(newDir func() string, o Options) (*Cluster, error) {
	n := max(o.Members, 1)
	c := &Cluster{certs: o.Certs}
	scheme := "http"
	if o.Certs != nil {
		scheme = "https"
	}
	var peers []string
	token := fmt.Sprintf("fr-etcd-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range n {
		client, err := freeAddr()
		if err != nil {
			return nil, err
		}
		peer, err := freeAddr()
		if err != nil {
			return nil, err
		}
		m := &Member{Name: fmt.Sprintf("m%d", i), Client: scheme + "://" + client, dir: newDir()}
		peer = "http://" + peer
		peers = append(peers, m.Name+"="+peer)
		m.args = []string{
			"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.Client, "--advertise-client-urls", m.Client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster-token", token, "--initial-cluster-state", "new",
			// Fast elections, so that leader-loss tests are short, but not
			// so fast that a loaded machine makes leaders flap.
			"--heartbeat-interval", "100", "--election-timeout", "1000",
		}
		if o.QuotaBytes > 0 {
			m.args = append(m.args, "--quota-backend-bytes", fmt.Sprint(o.QuotaBytes))
		}
		if o.Certs != nil {
			m.args = append(m.args, "--cert-file", o.Certs.ServerCert, "--key-file", o.Certs.ServerKey,
				"--trusted-ca-file", o.Certs.CA, "--client-cert-auth")
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = append(m.args, "--initial-cluster", strings.Join(peers, ","))
		if err := m.launch(); err != nil {
			return c, err
		}
	}
	for _, m := range c.Members {
		if err := c.ready(m); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) kill() {
	for _, m := range c.Members {
		m.Kill()
	}
}

// Endpoints are the members' client URLs, comma-separated.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Client)
	}
	return strings.Join(eps, ",")
}

// Client is a client of the whole cluster, closed by the test's cleanup.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cfg := clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if c.certs != nil {
		cfg.TLS = c.certs.ClientTLS(c.t)
	}
	cl, err := clientv3.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// WaitReady waits until member m answers a linearizable read.
func (c *Cluster) WaitReady(m *Member) {
	c.t.Helper()
	if err := c.ready(m); err != nil {
		c.t.Fatal(err)
	}
}

// ready waits up to 30 s until member m answers a linearizable read.
func (c *Cluster) ready(m *Member) error {
	cfg := clientv3.Config{Endpoints: []string{m.Client}, DialTimeout: time.Second, Logger: zap.NewNop()}
	if c.certs != nil {
		tc, err := c.certs.clientTLS()
		if err != nil {
			return err
		}
		cfg.TLS = tc
	}
	cl, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s at %s not ready: %v (log: %s)", m.Name, m.Client, err, m.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *Member) start(t testing.TB) {
	t.Helper()
	if err := m.launch(); err != nil {
		t.Fatal(err)
	}
}

func (m *Member) launch() error {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	m.cmd = exec.Command(Binary(), m.args...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		m.cmd = nil
		return fmt.Errorf("start etcd: %w", err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(m.cmd, m.done)
	return nil
}

// Pid is the member's process id.
func (m *Member) Pid() int { return m.cmd.Process.Pid }

// Pause SIGSTOPs the member; Resume SIGCONTs it.
func (m *Member) Pause()  { m.cmd.Process.Signal(syscall.SIGSTOP) }
func (m *Member) Resume() { m.cmd.Process.Signal(syscall.SIGCONT) }

// Kill SIGKILLs the member and waits until it is reaped.
func (m *Member) Kill() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGCONT)
	m.cmd.Process.Kill()
	<-m.done
}

// Restart starts a killed member again on its data.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	for i, a := range m.args {
		if a == "--initial-cluster-state" {
			m.args[i+1] = "existing"
		}
	}
	m.start(t)
}

// LogTail is the end of the member's log, for failure messages.
func (m *Member) LogTail() string {
	data, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreeAddr is a loopback address nobody listens on, for "unreachable".
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Certs are PEM files of a test CA, a server certificate for 127.0.0.1 and
// a client certificate, all signed by it. A cluster started with them
// requires the client certificate.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// NewCerts writes a fresh CA and certificates into a temporary directory.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := newKey(t), &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencerun test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caCert, caCert, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	c := &Certs{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, c.CA, "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage ...x509.ExtKeyUsage) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		cert, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
		return cert, keyPath
	}
	// etcd's gateway dials the server with the server's own certificate.
	c.ServerCert, c.ServerKey = issue("server", 2, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	c.ClientCert, c.ClientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return c
}

// ClientTLS is a client configuration trusting the test CA, with the
// client certificate.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := c.clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (c *Certs) clientTLS() (*tls.Config, error) {
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
