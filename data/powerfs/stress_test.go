package powerfs_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// TestConcurrentWritesRevertToLastSync has goroutines write, truncate and
// fsync their own files concurrently, in random steps from a fixed seed,
// and checks after the cut that each file holds exactly what it held at
// its last fsync.
func TestConcurrentWritesRevertToLastSync(t *testing.T) {
	r := newRig(t)
	const workers, steps = 4, 300
	synced := make([][]byte, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		r.write(fmt.Sprintf("f%d", w), 0, "", true)
	}
	r.syncDir("")
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			f, err := os.OpenFile(r.path(fmt.Sprintf("f%d", w)), os.O_RDWR, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			var cur []byte
			for range steps {
				switch k := rng.IntN(10); {
				case k < 6:
					off := rng.IntN(len(cur) + 3*4096)
					data := make([]byte, 1+rng.IntN(9000))
					for i := range data {
						data[i] = byte(rng.Uint32())
					}
					if _, err := f.WriteAt(data, int64(off)); err != nil {
						errs <- err
						return
					}
					if end := off + len(data); end > len(cur) {
						cur = append(cur, make([]byte, end-len(cur))...)
					}
					copy(cur[off:], data)
				case k < 8:
					size := rng.IntN(len(cur) + 4096)
					if err := f.Truncate(int64(size)); err != nil {
						errs <- err
						return
					}
					if size > len(cur) {
						cur = append(cur, make([]byte, size-len(cur))...)
					}
					cur = cur[:size]
				default:
					if err := f.Sync(); err != nil {
						errs <- err
						return
					}
					synced[w] = append([]byte(nil), cur...)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rs := r.crash()
	for w := range workers {
		r.want(fmt.Sprintf("f%d", w), string(synced[w]))
	}
	t.Logf("revert: %+v", rs)
}
