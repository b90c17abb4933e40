package supervisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// S2 with a cgroup, against the shortcut of 0201062 (nothingBelow: the
// sweep below this process is skipped when only running commands' direct
// children are found once the cgroup is empty). The escapee's parent stays
// in the command's cgroup until the sweep's cgroup.kill ends it, so the
// cgroup turns empty (cgroup_exit) before the parent's exit hands the
// escapee to this process: the shortcut must still see the dying parent,
// or the escapee, among this process's children, and the escapee must be
// dead when Wait returns. In a second shape the escapee's parent has left
// the cgroup too and lives on: a chain of two outside it. Each shape runs
// a few times, as the windows are short.
func TestCgroupEscapeeReparentedDuringTheSweep(t *testing.T) {
	h := hierarchy(t)
	for _, shape := range []string{"parent in the cgroup", "parent outside too"} {
		t.Run(shape, func(t *testing.T) {
			for i := range 5 {
				e := newEnv(t)
				elsewhere := h.NewPath()
				if err := os.Mkdir(elsewhere, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					os.WriteFile(filepath.Join(elsewhere, "cgroup.kill"), []byte("1"), 0)
					for i := 0; i < 100 && os.Remove(elsewhere) != nil; i++ {
						time.Sleep(10 * time.Millisecond)
					}
				})
				escape := `echo $$ > ` + elsewhere + `/cgroup.procs && trap "" TERM && echo $$ > $INBOX && while :; do sleep 1; done`
				parent := `trap "" TERM; sh -c '` + escape + `' & while :; do sleep 1; done`
				if shape == "parent outside too" {
					parent = `echo $$ > ` + elsewhere + `/cgroup.procs; ` + parent
				}
				// The direct child exits once told: the parent is then
				// an adopted child of this process, the escapee its child.
				p, err := Start(Config{Argv: []string{"sh", "-c",
					`sh -c "$0" & while [ ! -e $INBOX.go ]; do sleep 0.01; done`, parent},
					Env: e.env, Grace: 100 * time.Millisecond, Cgroup: h.NewPath()})
				if err != nil {
					t.Fatal(err)
				}
				escapee := e.inbox.nextPid(t)
				if p.cg.has(escapee.pid) {
					t.Fatal("the escapee is still in the command's cgroup: the scenario did not happen")
				}
				if err := os.WriteFile(e.inbox.path+".go", []byte("go\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if st := wait(t, p); st.Code != 0 {
					t.Errorf("run %d: status %+v, want exit 0", i, st)
				}
				if alive(escapee) {
					t.Errorf("run %d: the escapee pid %d outlived Wait", i, escapee.pid)
				}
				requireGone(t, escapee, false)
			}
		})
	}
}
