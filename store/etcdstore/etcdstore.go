package etcdstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencerun/fencerun/store"
)

// MinTTL is etcd's shortest lease; TTLs are whole seconds.
const MinTTL = 2 * time.Second

// Options configure a Store.
type Options struct {
	Endpoints []string
	// DialTimeout bounds how long every call that is not a wait may go
	// unanswered before it fails naming the endpoints and the cause (E6).
	DialTimeout time.Duration
	TLS         *tls.Config // nil: plain connections
	// CACert, Cert and Key name the files TLS was built from, for the
	// command's environment (E9: ETCDCTL_CACERT, ETCDCTL_CERT,
	// ETCDCTL_KEY); empty ones are not given.
	CACert, Cert, Key string
	Username          string
	Password          string
	Logger            hclog.Logger // nil: discarded
	// Running counts the processes of trees on this host (the caller's
	// supervisor.CountTrees): Prune deletes a dead waiter's record only
	// when nothing of its tree runs. Nil: it deletes none. The backend
	// itself reads no process tree and stops none.
	Running func([]store.Leftover) (int, error)
}

// Every connection is health-checked (E7), as etcdctl's are: gRPC pings a
// connection that read nothing for keepAliveTime (etcdctl asks for 2 s,
// which gRPC raises to its floor of 10 s) and closes it when the ping is
// not answered within keepAliveTimeout; gRPC also sets that timeout as the
// socket's TCP_USER_TIMEOUT, so a connection whose data stays unacknowledged
// for it (a black-holed or cut-off member) is closed by the kernel. A closed
// connection leaves the client's rotation until it is dialled again, and
// the calls on it fail over to a live member (see Lease.Renew and the
// waiter's keep). The connections a renewal or a wait uses carry a
// request every third of the TTL (the keep-alive; a waiter's watch, a
// progress request: see prober), so a member that goes silent is out of
// use within about a second of the next one; etcdctl's 6 s timeout would
// leave it in use past a short TTL. A false alarm (a second with no
// acknowledgement on a live link) costs a reconnection, never the lease.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = time.Second
)

// window is the client's gRPC flow-control window, per stream and for the
// connection (see Open).
const window = 4 << 20

// Store is a lease store on an etcd cluster. See the package comment.
type Store struct {
	c       *clientv3.Client
	kv      pb.KVClient // c's connection, without the client's request builders (Lease.compare)
	eps     []string
	timeout time.Duration
	tls     *tls.Config
	log     hclog.Logger
	host    string
	running func([]store.Leftover) (int, error)
	env     []string // what the command is told of the cluster (Lease.Env)

	proberOnce sync.Once
	prober     *prober // keeps the watches' connection checked (E7)

	ticksOnce sync.Once
	ticks     string
	ticksErr  error
	// ticksPrivate: ticks is this process's own directory, which Close
	// removes (the user's could not be used: TickDir).
	ticksPrivate bool
	// bound are the files bindTick wrote, which Close removes.
	boundMu sync.Mutex
	bound   []string
}

var _ store.Store = (*Store)(nil)

// Open connects to the cluster. Connections are made lazily, so Open
// returns at once except with a user, whose password is checked here; the
// first call names an unreachable cluster.
func Open(opts Options) (*Store, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Store{eps: opts.Endpoints, timeout: opts.DialTimeout, tls: opts.TLS, log: opts.Logger.Named("store"), running: opts.Running}
	s.host, _ = os.Hostname()
	s.env = commandEnv(opts)
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		DialTimeout: opts.DialTimeout,
		TLS:         opts.TLS,
		Username:    opts.Username,
		Password:    opts.Password,
		// The client's own logs would go to stderr unasked; fencerun says
		// what failed in its own words.
		Logger: zap.NewNop(),
		// Health-checked connections (E7): see keepAliveTimeout.
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		// Fixed flow-control windows, which turn gRPC's bandwidth-delay
		// probe off: with it, every answer the client read (each of a
		// renewal's) made it send a window update and a ping, and read the
		// ping's answer, one more write and wake-up a renewal (P4 on etcd:
		// docs/DESIGN.md). A window bounds only how much the server may send
		// ahead of the reader: 4 MiB, 64 times gRPC's initial one, is more
		// than any answer of ours but a list of a very large cluster's keys,
		// which then takes a round trip per 4 MiB.
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window)},
	})
	if err != nil {
		return nil, s.fail("connect", err)
	}
	s.c = c
	s.kv = pb.NewKVClient(c.ActiveConnection())
	return s, nil
}

// Close closes the client and removes the tick directory. Leases taken
// from the Store stop working: a caller releases them first.
func (s *Store) Close() error {
	if s.ticksPrivate {
		os.RemoveAll(s.ticks)
	}
	s.unbindTicks()
	return s.c.Close()
}

// commandEnv is what a command run under a lease of this store is told
// of the cluster, as etcdctl reads it, so that its own etcdctl (the
// README's fencing transaction) reaches the same cluster the same way
// (E9): the endpoints, and the TLS files fencerun was given, as absolute
// paths (the command may change its directory). Never the user or the
// password: fencerun passes no credentials on.
func commandEnv(o Options) []string {
	env := []string{"ETCDCTL_ENDPOINTS=" + strings.Join(o.Endpoints, ",")}
	for _, f := range []struct{ name, path string }{{"ETCDCTL_CACERT", o.CACert}, {"ETCDCTL_CERT", o.Cert}, {"ETCDCTL_KEY", o.Key}} {
		if f.path == "" {
			continue
		}
		if abs, err := filepath.Abs(f.path); err == nil {
			f.path = abs
		}
		env = append(env, f.name+"="+f.path)
	}
	return env
}

// TickDir is the directory for the tick sockets of commands run under this
// store: etcd has no local state, so it is the user's own tick directory in
// $TMPDIR (userTickDir), or where that name is not a private directory of
// this user, a fresh private one of this process (0700, a name nobody
// could create beforehand), removed by Close. Only this user can reach a
// socket in it (S9).
func (s *Store) TickDir() (string, error) {
	s.ticksOnce.Do(func() {
		s.ticks, s.ticksErr = userTickDir()
		if s.ticksErr == nil {
			return
		}
		s.ticks, s.ticksErr = os.MkdirTemp("", ticksPattern+strconv.Itoa(os.Geteuid())+"-")
		s.ticksPrivate = s.ticksErr == nil
		if s.ticksErr != nil {
			s.ticksErr = fmt.Errorf("etcdstore: tick directory: %w", s.ticksErr)
		}
	})
	return s.ticks, s.ticksErr
}

// TLSConfig builds the TLS configuration of etcdctl's --cacert, --cert and
// --key: a CA bundle to trust instead of the system's, and a client
// certificate. Empty names are not used.
func TLSConfig(cacert, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: --cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcdstore: --cacert %s: no PEM certificate in it", cacert)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("etcdstore: --cert and --key-file go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: --cert %s, --key-file %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// op bounds one call that is not a wait by the dial timeout, and asks the
// server to refuse it at once when it has no leader.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

// fail names the endpoints and the cause of a failed call (E6).
func (s *Store) fail(what string, err error) error {
	return fmt.Errorf("etcd %s: %s: %s", strings.Join(s.eps, ","), what, s.cause(err))
}

// cause says in words why a call failed. gRPC reports an unreachable
// server, a refused certificate and a silent one alike, as a deadline;
// then each endpoint is dialled to find which it is.
func (s *Store) cause(err error) string {
	switch {
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrGRPCNoLeader):
		return "the cluster has no leader (quorum lost?)"
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return "database space exceeded (NOSPACE alarm): compact and defragment it, or raise --quota-backend-bytes, then etcdctl alarm disarm"
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed):
		return "authentication failed: wrong user or password"
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrGRPCPermissionDenied):
		return "permission denied: the user lacks a role that grants these keys"
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return "authentication is enabled on the cluster: give --user and --password"
	}
	msg := rpctypes.ErrorDesc(err)
	broken := strings.Contains(err.Error(), "code = Unavailable") && !strings.Contains(msg, "deadline exceeded")
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A stream's send on a closed connection (gRPC leaves the status
		// to its receive): a renewal's keep-alive with the server gone.
		msg, broken = "the connection closed", true
	}
	if broken {
		// The connection broke under the call (gRPC's Unavailable, "error
		// reading from server: EOF"): say why, if the endpoints tell.
		if probe := s.probe(); probe != "" {
			return msg + ": " + probe
		}
		return msg
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "Unavailable") {
		if probe := s.probe(); probe != "" {
			return fmt.Sprintf("no answer within %v: %s", s.timeout, probe)
		}
		if s.leaderless() {
			return fmt.Sprintf("no answer within %v: the cluster has no leader (quorum lost?)", s.timeout)
		}
		return fmt.Sprintf("no answer within %v, though the endpoints accept connections", s.timeout)
	}
	return msg
}

// probe dials each endpoint as the client would and says what failed.
func (s *Store) probe() string {
	var out []string
	for _, ep := range s.eps {
		host, secure := endpointAddr(ep)
		timeout := min(s.timeout/2, time.Second)
		conn, err := net.DialTimeout("tcp", host, timeout)
		if err == nil && (secure || s.tls != nil) {
			cfg := &tls.Config{}
			if s.tls != nil {
				cfg = s.tls.Clone()
			}
			if h, _, err := net.SplitHostPort(host); err == nil && cfg.ServerName == "" {
				cfg.ServerName = h
			}
			tc := tls.Client(conn, cfg)
			tc.SetDeadline(time.Now().Add(timeout))
			err = tc.Handshake()
			conn = tc
		}
		if conn != nil {
			conn.Close()
		}
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", ep, err))
		}
	}
	return strings.Join(out, "; ")
}

// leaderless says whether every endpoint that answers a status request
// knows no leader.
func (s *Store) leaderless() bool {
	answered := false
	for _, ep := range s.eps {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.timeout/2, time.Second))
		st, err := s.c.Status(ctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader != 0 {
			return false
		}
		answered = true
	}
	return answered
}

// endpointAddr is host:port of an endpoint URL (or of a bare host:port),
// and whether it asks for TLS.
func endpointAddr(ep string) (string, bool) {
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return ep, false
	}
	return u.Host, u.Scheme == "https"
}

// Side keys; see the package comment.
const side = "_fencerun/"

func prefixOf(key string) string           { return key + "/" }
func descKey(id clientv3.LeaseID) string   { return side + "desc/" + leaseHex(id) }
func cancelKey(id clientv3.LeaseID) string { return side + "cancel/" + leaseHex(id) }
func leftoversOf(key string) string        { return side + "leftovers/" + key + "/" }
func leftoverKey(key string, id clientv3.LeaseID) string {
	return leftoversOf(key) + leaseHex(id)
}

// isLeftoverOf says whether k, read under leftoversOf(key), is a leftover
// record of key itself: keys may hold "/", so that prefix also covers the
// records of the keys below key ("a/b" under "a"), whose holders may be
// alive and are none of key's business.
func isLeftoverOf(key string, k []byte) bool {
	rest, ok := strings.CutPrefix(string(k), leftoversOf(key))
	return ok && rest != "" && !strings.Contains(rest, "/")
}
func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// ttlSeconds is a TTL in etcd's whole seconds, rounded up.
func ttlSeconds(ttl time.Duration) int64 { return int64((ttl + time.Second - 1) / time.Second) }
