// Command populate fills a file-backend state directory with free keys for
// the P6 figures of the benchmark harness (../): each key is acquired and
// released once through package filestore, the code fencerun itself runs,
// so the store holds the records a real `fencerun run --key K -- true`
// leaves behind, without ten thousand process start-ups.
//
// It is a program of its own, built by the harness, so that the harness
// still builds and measures flock(1) when the store does not compile.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fencerun/fencerun/store"
	"github.com/fencerun/fencerun/store/filestore"
)

func main() {
	dir := flag.String("dir", "", "state root to fill")
	keys := flag.Int("keys", 0, "keys to make")
	format := flag.String("format", "bench-%05d", "key name, from its index")
	workers := flag.Int("workers", 16, "acquisitions at the same time (fsyncs batch in the journal)")
	flag.Parse()
	if err := populate(*dir, *keys, *format, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "populate:", err)
		os.Exit(1)
	}
}

func populate(dir string, keys int, format string, workers int) error {
	s, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	var (
		next  = make(chan int)
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := once(s, fmt.Sprintf(format, i)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func once(s store.Store, key string) error {
	ctx := context.Background()
	l, holder, err := s.Acquire(ctx, key, store.Claim{Name: "populate", TTL: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("acquire %s: %w", key, err)
	}
	if l == nil {
		return fmt.Errorf("acquire %s: busy, held by pid %d", key, holder.PID)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}
