package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// S4, issue 26 point 5: the owner moves the whole state root aside while
// a holder with fence 4 runs. The newcomer rightly waits for the moved
// holder's claim, then takes the key from a fresh root: its fence was 1,
// a token the live holder's 4 had already passed. A counter restarted
// while a holder was proven alive now starts above every fence a counter
// can have reached (the clock's floor, as release --force's repair).
func TestMovedStateRootDoesNotReuseFences(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	for range 3 {
		if code := s.run("warm", "run", "--key", "job", "--", "true"); code != 0 {
			t.Fatalf("warm-up run: exit %d", code)
		}
	}
	holder := s.start(s.fencerun("holder", "run", "--key", "job", "--grace", "1s", "--",
		"sh", "-c", `trap "" TERM; echo $FENCERUN_FENCE > fenceA.tmp && mv fenceA.tmp fenceA; exec sleep 1000`))
	a := s.fenceIn("fenceA")
	s.waitHeld("job")
	if err := os.Rename(s.state, s.state+".moved"); err != nil {
		t.Fatal(err)
	}
	second := s.start(s.fencerun("second", "run", "--key", "job", "--",
		"sh", "-c", `echo $FENCERUN_FENCE > fenceB.tmp && mv fenceB.tmp fenceB`))
	b := s.fenceIn("fenceB")
	if b <= a {
		t.Errorf("the newcomer after the root was moved got fence %d, not above the live holder's %d", b, a)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("moved holder: exit %d, want 76", code)
	}
	if code := exitOf(t, second); code != 0 {
		t.Errorf("newcomer: exit %d", code)
	}
}

// The same for a resident role: `rm -f app.db*` under a holder with fence
// 4 removes the lock file and the fence counter beside the store.
func TestRemovedResidentFilesDoNotReuseFences(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	store := s.path("app.db")
	for range 3 {
		if code := s.run("warm", "run", "--resident", store, "--", "true"); code != 0 {
			t.Fatalf("warm-up run: exit %d", code)
		}
	}
	holder := s.start(s.fencerun("holder", "run", "--resident", store, "--grace", "1s", "--",
		"sh", "-c", `trap "" TERM; echo $FENCERUN_FENCE > fenceA.tmp && mv fenceA.tmp fenceA; exec sleep 1000`))
	a := s.fenceIn("fenceA")
	files, _ := filepath.Glob(store + "*")
	for _, f := range files {
		os.Remove(f)
	}
	second := s.start(s.fencerun("second", "run", "--resident", store, "--wait", "forever", "--",
		"sh", "-c", `echo $FENCERUN_FENCE > fenceB.tmp && mv fenceB.tmp fenceB`))
	b := s.fenceIn("fenceB")
	if b <= a {
		t.Errorf("the newcomer after the role's files were removed got fence %d, not above the live holder's %d", b, a)
	}
	if code := exitOf(t, holder); code != 76 {
		t.Errorf("holder whose files were removed: exit %d, want 76", code)
	}
	if code := exitOf(t, second); code != 0 {
		t.Errorf("newcomer: exit %d", code)
	}
}
