package jsonstr

import (
	"encoding/json"
	"testing"
)

// Every single byte, and strings around them: where AppendPlain says
// plain, its bytes are encoding/json's; where encoding/json would write
// the string otherwise than quoted as it is, AppendPlain says not plain
// and appends nothing. (It may also refuse what encoding/json writes as
// it is, DEL and non-ASCII: those go to encoding/json, costing speed.)
func TestAppendPlainIsJSON(t *testing.T) {
	var cases []string
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), "boot-"+string([]byte{byte(c)})+"-id")
	}
	cases = append(cases, "", "0f9a-11ee", "é", "\u2028")
	for _, s := range cases {
		want, _ := json.Marshal(s)
		got, plain := AppendPlain([]byte("x"), s)
		asIs := string(want) == `"`+s+`"`
		switch {
		case plain && !asIs:
			t.Errorf("%q: plain, but encoding/json writes %s", s, want)
		case !plain && asIs && ascii(s):
			t.Errorf("%q: not plain, although encoding/json writes it as it is", s)
		case plain && string(got) != "x"+string(want):
			t.Errorf("%q: appended %q, want %q", s, got[1:], want)
		case !plain && string(got) != "x":
			t.Errorf("%q: not plain, yet appended %q", s, got[1:])
		}
	}
}

// ascii reports whether s has no byte of DEL or above.
func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x7f {
			return false
		}
	}
	return true
}
