package filestore

import (
	"testing"
	"time"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/storetest"
)

// The file backend keeps the whole store contract; a dead holder or waiter
// is known dead at once (its kernel lock is dropped).
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) (store.Store, string) {
			s, root := newStore(t)
			return s, root
		},
		Open: openRoot,
		TTL:  time.Minute,
		Many: true,
	})
}

func openRoot(root string) (store.Store, error) { return Open(root, Options{}) }
