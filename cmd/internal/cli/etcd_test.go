package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/store"
)

// unsetenv unsets v for the test, and restores it afterwards (t.Setenv
// can only set).
func unsetenv(t *testing.T, v string) {
	t.Helper()
	old, had := os.LookupEnv(v)
	os.Unsetenv(v)
	t.Cleanup(func() {
		if had {
			os.Setenv(v, old)
		}
	})
}

// An --etcd given empty is refused (125, naming the flag) before anything
// is created: taken as the file backend, a lock meant for every host would
// be this host's only. FENCERUN_ETCD set empty is unset, as every variable.
// So are a malformed endpoint and a --dial-timeout of 0, before any store
// is opened or dialled.
func TestBadEtcdFlagsAreRefused(t *testing.T) {
	for _, v := range []string{"FENCERUN_ETCD", "FENCERUN_DIAL_TIMEOUT", "ETCDCTL_DIAL_TIMEOUT"} {
		unsetenv(t, v)
	}
	dir := t.TempDir() + "/state"
	opened := false
	opener := func(EtcdFlags, hclog.Logger) (store.Store, error) { opened = true; return nil, os.ErrInvalid }
	for _, args := range [][]string{
		{"--dir", dir, "--etcd", "", "run", "--key", "k", "--", "true"},
		{"--dir", dir, "--etcd=", "status", "k"},
		{"--dir", dir, "run", "--etcd", " ", "--key", "k", "--", "true"},
		{"--dir", dir, "--etcd", "notaurl", "run", "--key", "k", "--", "true"},
		{"--dir", dir, "--etcd", "http://127.0.0.1:2379,h:x", "status", "k"},
		{"--dir", dir, "--etcd", "http://127.0.0.1:2379", "--dial-timeout", "0", "run", "--key", "k", "--", "true"},
	} {
		if code := Main(args, Etcd{Open: opener, MinTTL: 2 * time.Second}); code != exitFailed {
			t.Errorf("%q: exit %d, want %d", args, code, exitFailed)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%q created %s (%v)", args, dir, err)
		}
	}
	if opened {
		t.Error("a refused --etcd or --dial-timeout opened a store")
	}
}

// checkEndpoint takes every form the etcd client dials and refuses, with
// the cause, what it would only fail on after --dial-timeout.
func TestCheckEndpoint(t *testing.T) {
	for _, ep := range []string{"http://127.0.0.1:2379", "https://etcd.example:2379", "10.0.0.1:2379", "[::1]:2379",
		"http://[::1]:2379", "http://u:pw@h:1/ignored", "unix:///run/etcd.sock", "unix://etcd.sock", "unixs:etcd.sock", ":2379",
		"HTTP://127.0.0.1:2379", "Https://etcd.example:2379", "UNIX:///run/etcd.sock", "Unix://etcd.sock", "UNIX:/run/etcd.sock", "UNIXS:etcd.sock"} {
		if err := checkEndpoint(ep); err != nil {
			t.Errorf("checkEndpoint(%q) = %v, want nil", ep, err)
		}
	}
	for _, tt := range []struct{ ep, cause string }{
		{"notaurl", "missing port in address"},
		{"http://", "missing port in address"},
		{"http://h", "missing port in address"},
		{"h:notaport", `port "notaport" is not a number`},
		{"http://h:99999", `port "99999" is not a number`},
		{"h:0", `port "0" is not a number`},
		{"a:b:c", "too many colons"},
		{"ftp://h:1", `scheme "ftp" is not one etcd serves`},
		{"://h:1", `scheme "" is not one etcd serves`},
		{"http://[::1", "missing ']' in host"},
		{"unix://", "names no socket path"},
		{"UNIX://", "names no socket path"},
	} {
		err := checkEndpoint(tt.ep)
		if err == nil || !strings.Contains(err.Error(), tt.cause) {
			t.Errorf("checkEndpoint(%q) = %v, want %q", tt.ep, err, tt.cause)
		}
	}
}
