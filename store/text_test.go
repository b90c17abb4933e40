package store

import (
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"deploy", "deploy"},
		{"héllo wörld", "héllo wörld"},
		{"a\nb", `a\nb`},
		{"row\nfake   held  root (pid 1)", `row\nfake   held  root (pid 1)`},
		{"\x1b[2J\x1b]0;title\a", `\x1b[2J\x1b]0;title\a`},
		{"tab\there", `tab\there`},
		{"c1\u0085next", `c1\u0085next`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash`, `back\\slash`},
		{"del\x7f", `del\x7f`},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestValidateText(t *testing.T) {
	if err := ValidateText("--reason", strings.Repeat("x", MaxTextLen)); err != nil {
		t.Fatalf("exactly the limit: %v", err)
	}
	err := ValidateText("--reason", strings.Repeat("x", MaxTextLen+1))
	if err == nil || !strings.Contains(err.Error(), "--reason is 1025 bytes, over the limit of 1024 bytes") {
		t.Fatalf("over the limit: %v", err)
	}
}
