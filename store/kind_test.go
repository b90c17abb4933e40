package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A claim's kind: shared when Shared, slots when Slots is over 1, else
// exclusive (--slots 1 is the exclusive hold) (M1, M2).
func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		c    Claim
		kind Kind
		n    int
	}{
		{Claim{}, KindExclusive, 1},
		{Claim{Slots: 1}, KindExclusive, 1},
		{Claim{Slots: 2}, KindSlot, 2},
		{Claim{Slots: MaxSlots}, KindSlot, MaxSlots},
		{Claim{Shared: true}, KindShared, 1},
		{Claim{Shared: true, Slots: 1}, KindShared, 1},
	} {
		if k, n := KindOf(tc.c); k != tc.kind || n != tc.n {
			t.Errorf("KindOf(slots %d, shared %v) = %s, %d; want %s, %d", tc.c.Slots, tc.c.Shared, k, n, tc.kind, tc.n)
		}
	}
}

// Slots run 1 to MaxSlots (0 is the default, exclusive), and --shared
// does not combine with more than one slot (M1, M2).
func TestValidateClaimKind(t *testing.T) {
	for _, tc := range []struct {
		c    Claim
		fail string // in the error; "" for none
	}{
		{Claim{}, ""},
		{Claim{Slots: 1}, ""},
		{Claim{Slots: MaxSlots}, ""},
		{Claim{Shared: true}, ""},
		{Claim{Shared: true, Slots: 1}, ""},
		{Claim{Slots: -1}, "out of range"},
		{Claim{Slots: MaxSlots + 1}, "out of range"},
		{Claim{Shared: true, Slots: 2}, "cannot be combined"},
	} {
		err := ValidateClaimKind(tc.c)
		if tc.fail == "" && err != nil || tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)) {
			t.Errorf("ValidateClaimKind(slots %d, shared %v) = %v; want %q", tc.c.Slots, tc.c.Shared, err, tc.fail)
		}
	}
}

// Slot claims go only beside slot holders or waiters of as many slots;
// exclusive and shared ones only beside each other. A record without a
// kind (written before kinds) and a foreign holder are exclusive. The
// error wraps ErrSlots and names both sides and the role (M1).
func TestSameKind(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		n    int
		h    Holder
		fail []string // in the error; nil for none
	}{
		{KindExclusive, 1, Holder{}, nil},
		{KindExclusive, 1, Holder{Kind: KindExclusive}, nil},
		{KindExclusive, 1, Holder{Kind: KindShared}, nil},
		{KindShared, 1, Holder{Kind: KindExclusive}, nil},
		{KindShared, 1, Holder{Kind: KindShared}, nil},
		{KindShared, 1, Holder{}, nil},
		{KindExclusive, 1, Holder{Foreign: true}, nil},
		{KindSlot, 3, Holder{Kind: KindSlot, Slots: 3}, nil},
		{KindSlot, 2, Holder{Kind: KindSlot, Slots: 3, PID: 42}, []string{"--slots 3", "--slots 2", "pid 42"}},
		{KindSlot, 3, Holder{Kind: KindExclusive}, []string{"exclusive", "--slots 3"}},
		{KindSlot, 3, Holder{}, []string{"exclusive", "--slots 3"}},
		{KindSlot, 3, Holder{Kind: KindShared}, []string{"shared", "--slots 3"}},
		{KindSlot, 3, Holder{Foreign: true}, []string{"exclusive", "--slots 3"}},
		{KindExclusive, 1, Holder{Kind: KindSlot, Slots: 3}, []string{"--slots 3", "exclusive"}},
		{KindShared, 1, Holder{Kind: KindSlot, Slots: 2}, []string{"--slots 2", "shared"}},
	} {
		for _, role := range []string{"holder", "waiter"} {
			err := SameKind(tc.kind, tc.n, tc.h, role)
			what := func() string { return string(tc.kind) + " beside " + describeHolder(tc.h) + " as " + role }
			if tc.fail == nil {
				if err != nil {
					t.Errorf("SameKind(%s) = %v; want nil", what(), err)
				}
				continue
			}
			if !errors.Is(err, ErrSlots) {
				t.Errorf("SameKind(%s) = %v; want ErrSlots", what(), err)
				continue
			}
			for _, s := range append(tc.fail, role) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("SameKind(%s) = %q; want it to name %q", what(), err, s)
				}
			}
		}
	}
}

func describeHolder(h Holder) string {
	return fmt.Sprintf("%q of %d slots (foreign %v)", h.Kind, h.Slots, h.Foreign)
}

// The zero Which picks every holder; Slot picks the holder in that slot
// only (slot 0 an exclusive holder too, never a shared one); PID every holder of that fencerun; both, the one that has both
// (M3).
func TestWhichPicks(t *testing.T) {
	zero, one := 0, 1
	slot0 := Holder{Kind: KindSlot, Slot: &zero, Slots: 3, PID: 10}
	slot1 := Holder{Kind: KindSlot, Slot: &one, Slots: 3, PID: 11}
	excl := Holder{Kind: KindExclusive, PID: 10}
	shared := Holder{Kind: KindShared, PID: 12}
	for _, tc := range []struct {
		name  string
		w     Which
		all   bool
		picks []bool // slot0, slot1, excl, shared
	}{
		{"zero", Which{}, true, []bool{true, true, true, true}},
		{"slot 1", Which{Slot: &one}, false, []bool{false, true, false, false}},
		{"slot 0", Which{Slot: &zero}, false, []bool{true, false, true, false}},
		{"slot 0 pid 10", Which{Slot: &zero, PID: 10}, false, []bool{true, false, true, false}},
		{"pid 10", Which{PID: 10}, false, []bool{true, false, true, false}},
		{"pid 12", Which{PID: 12}, false, []bool{false, false, false, true}},
		{"pid 99", Which{PID: 99}, false, []bool{false, false, false, false}},
		{"slot 1 pid 11", Which{Slot: &one, PID: 11}, false, []bool{false, true, false, false}},
		{"slot 1 pid 10", Which{Slot: &one, PID: 10}, false, []bool{false, false, false, false}},
	} {
		if tc.w.All() != tc.all {
			t.Errorf("Which{%s}.All() = %v, want %v", tc.name, tc.w.All(), tc.all)
		}
		for i, h := range []Holder{slot0, slot1, excl, shared} {
			if got := tc.w.Picks(&h); got != tc.picks[i] {
				t.Errorf("Which{%s}.Picks(%s pid %d) = %v, want %v", tc.name, describeHolder(h), h.PID, got, tc.picks[i])
			}
		}
	}
}
