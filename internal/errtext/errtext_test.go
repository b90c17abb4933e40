package errtext

import (
	"errors"
	"fmt"
	"testing"
)

func TestSentence(t *testing.T) {
	lost := errors.New("store: lease lost")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("fence: lost: %w", fmt.Errorf("%w: the lease on \"k\" (fence 3) was revoked", lost)), `the lease on "k" (fence 3) was revoked`},
		{fmt.Errorf("supervisor: start %q: %w", "x", errors.New("permission denied")), `start "x": permission denied`},
		{errors.New("store: corrupt state: /s/keys/k/lease: unexpected end of JSON input"), "corrupt state: /s/keys/k/lease: unexpected end of JSON input"},
		{errors.New("key deploy:staging is busy: held by a (pid 1 on h)"), "key deploy:staging is busy: held by a (pid 1 on h)"},
		{errors.New("fence: lost"), "lost"},
		{errors.New("store"), "store"},
		{nil, ""},
	} {
		if got := Sentence(tc.err); got != tc.want {
			t.Errorf("Sentence(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
