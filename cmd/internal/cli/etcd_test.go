package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fencerun/fencerun/store"
)

// TestEarlyEtcdFlagsAgreeWithTheParse: the guess fencerun-etcd dials
// with before the command line is parsed equals what kong then parses,
// for flags, their variables and their defaults; a guess that differed
// would only cost a second dial, but then the early dial would be waste.
func TestEarlyEtcdFlagsAgreeWithTheParse(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"--etcd", "http://a:1", "run", "--key", "k", "--", "true"}},
		{"inline flags", nil, []string{"--etcd=http://a:1,http://b:2", "--dial-timeout=5", "status", "k"}},
		{"flags after the command", nil, []string{"run", "--etcd", "http://a:1", "--key", "k", "--cacert", "/ca.pem", "--dial-timeout", "1.5", "--", "true"}},
		{"variables", map[string]string{"FENCERUN_ETCD": "http://e:1", "ETCDCTL_CACERT": "/ca.pem", "ETCDCTL_DIAL_TIMEOUT": "3s"}, []string{"status", "k"}},
		{"FENCERUN_ before ETCDCTL_", map[string]string{"FENCERUN_ETCD": "http://e:1", "FENCERUN_USER": "u", "ETCDCTL_USER": "v", "ETCDCTL_PASSWORD": "pw"}, []string{"list"}},
		{"a flag before its variable", map[string]string{"FENCERUN_ETCD": "http://e:1", "FENCERUN_USER": "u", "FENCERUN_KEY_FILE": "/k.pem"}, []string{"--user", "w", "--key-file", "/j.pem", "--cert", "/c.pem", "list"}},
		{"the command's arguments are not fencerun's", nil, []string{"--etcd", "http://a:1", "run", "--key", "k", "--", "sh", "--etcd", "http://z:9", "--user", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range []string{"FENCERUN_ETCD", "FENCERUN_CACERT", "ETCDCTL_CACERT", "FENCERUN_CERT", "ETCDCTL_CERT",
				"FENCERUN_KEY_FILE", "ETCDCTL_KEY", "FENCERUN_USER", "ETCDCTL_USER", "FENCERUN_PASSWORD", "ETCDCTL_PASSWORD",
				"FENCERUN_DIAL_TIMEOUT", "ETCDCTL_DIAL_TIMEOUT"} {
				t.Setenv(v, "")
				unsetenv(t, v)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c CLI
			parser, err := newParser(&c, func(int) {})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.Parse(tt.args); err != nil {
				t.Fatalf("parse %q: %v", tt.args, err)
			}
			early, ok := EarlyEtcdFlags(tt.args)
			if !ok {
				t.Fatalf("EarlyEtcdFlags(%q) names no endpoint; the parse gave %+v", tt.args, c.EtcdFlags)
			}
			if early != c.EtcdFlags {
				t.Errorf("EarlyEtcdFlags(%q) = %+v, the parse gave %+v", tt.args, early, c.EtcdFlags)
			}
		})
	}
	t.Run("no endpoint", func(t *testing.T) {
		unsetenv(t, "FENCERUN_ETCD")
		if f, ok := EarlyEtcdFlags([]string{"run", "--key", "k", "--", "true", "--etcd", "x"}); ok {
			t.Errorf("no --etcd before the command: guessed %+v", f)
		}
	})
}

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
// is opened or dialled, early (fencerun-etcd's dial during the parse) or
// not.
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
		if f, ok := EarlyEtcdFlags(args); ok {
			t.Errorf("%q: fencerun-etcd would dial %+v during the parse", args, f)
		}
		if code := Main(args, opener); code != exitFailed {
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
