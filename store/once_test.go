package store

import (
	"fmt"
	"strings"
	"testing"
)

// A key keeps its newest MaxDone marks, newest first, each ID once, and
// a bounded name with each (O3).
func TestMarkDoneKeepsTheNewestThousand(t *testing.T) {
	var done []Done
	for i := range MaxDone + 5 {
		done = MarkDone(done, Done{ID: fmt.Sprint(i), Fence: uint64(i + 1), Name: strings.Repeat("n", 2000)})
	}
	if len(done) != MaxDone {
		t.Fatalf("kept %d marks, want %d", len(done), MaxDone)
	}
	if done[0].ID != fmt.Sprint(MaxDone+4) || done[MaxDone-1].ID != "5" {
		t.Errorf("kept %s..%s, want the newest first: %d..5", done[0].ID, done[MaxDone-1].ID, MaxDone+4)
	}
	if len(done[0].Name) > maxDoneName {
		t.Errorf("kept a name of %d bytes", len(done[0].Name))
	}
	done = MarkDone(done, Done{ID: "500", Fence: 9999})
	if len(done) != MaxDone || done[0].ID != "500" || FindDone(done, "500").Fence != 9999 {
		t.Errorf("a mark of an ID done before is not the one newest mark: %+v", done[:2])
	}
	n := 0
	for _, d := range done {
		if d.ID == "500" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("ID 500 is kept %d times", n)
	}
	if FindDone(done, "4") != nil {
		t.Error("an ID dropped past the bound is found")
	}
}

func TestValidateID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"2026-12-04T21:00:00Z", true},
		{"nightly report 12/04", true},
		{"", false},
		{strings.Repeat("x", MaxIDLen), true},
		{strings.Repeat("x", MaxIDLen+1), false},
		{"a\nb", false},
		{"bad\xff", false},
		{`back\slash`, false},
	} {
		if err := ValidateID(c.id); (err == nil) != c.ok {
			t.Errorf("ValidateID(%q) = %v, want ok %v", c.id, err, c.ok)
		}
	}
}
