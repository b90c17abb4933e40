package main

import "testing"

func TestWantsTLS(t *testing.T) {
	for ep, want := range map[string]bool{
		"https://h:2379":                 true,
		"HTTPS://h:2379":                 true,
		"http://a:1,Https://b:2":         true,
		"unixs:///run/etcd.sock":         true,
		"UNIXS://etcd.sock":              true,
		"http://h:2379":                  false,
		"h:2379":                         false,
		"unix:///run/etcd.sock":          false,
		"HTTP://h:2379,unix://etcd.sock": false,
	} {
		if got := wantsTLS(ep); got != want {
			t.Errorf("wantsTLS(%q) = %v, want %v", ep, got, want)
		}
	}
}
