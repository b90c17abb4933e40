package filestore

import (
	"testing"

	"github.com/fencerun/fencerun/internal/statefs"
	"github.com/fencerun/fencerun/internal/ticksock"
	"github.com/fencerun/fencerun/store"
)

// S9: a group store's records are marked Shared, and keep only markers of
// the store's own tick sockets; a private store's are taken as written.
func TestMarkSharedRecords(t *testing.T) {
	own := ticksock.Marker("/srv/st/ticks/t-0123456789abcdef0123456789abcdef")
	other := ticksock.Marker("/root/.local/state/fencerun/ticks/t-0123456789abcdef0123456789abcdef")
	trees := []store.Leftover{{HolderPID: 1, Marker: own}, {HolderPID: 2, Marker: other}}
	group := &Store{root: "/srv/st", real: "/srv/st", access: statefs.Access{Shared: true}}
	got := group.mark(trees)
	if !got[0].Shared || !got[1].Shared {
		t.Errorf("group store trees not marked Shared: %+v", got)
	}
	if got[0].Marker != own || got[1].Marker != "" {
		t.Errorf("markers kept: %q, %q; want %q, \"\"", got[0].Marker, got[1].Marker, own)
	}
	if trees[1].Marker != other {
		t.Error("mark changed its argument")
	}
	private := &Store{root: "/srv/st", real: "/srv/st"}
	if got := private.mark(trees); got[1].Shared || got[1].Marker != other {
		t.Errorf("private store tree changed: %+v", got[1])
	}
}
