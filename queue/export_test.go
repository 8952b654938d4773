package queue

import (
	"sync"
	"time"
)

// PauseEvents stops (or resumes) n's outcome event publisher, as if the
// instance were cut off from the event stream while it keeps deciding.
func PauseEvents(n *Node, paused bool) { n.events.paused.Store(paused) }

// SetHistoryQuiet sets how long the history check waits for its consumer
// before it reads directly, until the test ends.
func SetHistoryQuiet(tb interface{ Cleanup(func()) }, d time.Duration) {
	old := historyQuiet
	historyQuiet = d
	tb.Cleanup(func() { historyQuiet = old })
}

// SetEventBatchBytes bounds event batch messages to n bytes until the test
// ends.
func SetEventBatchBytes(tb interface{ Cleanup(func()) }, n int) {
	old := eventBatchBytes
	eventBatchBytes = n
	tb.Cleanup(func() { eventBatchBytes = old })
}

// ReloadJetStream reloads n's embedded JetStream as the store watch does
// once a full disk has room again. The watch is stopped first, for good:
// it would see JetStream down meanwhile and reload it too.
func ReloadJetStream(n *Node) error {
	w, _ := stoppedWatches.LoadOrStore(n, n.watch)
	if n.watch != nil {
		n.watch.close()
		n.watch = nil
	}
	return n.reloadJetStream(w.(*storeWatch).ns, w.(*storeWatch).opts)
}

var stoppedWatches sync.Map // *Node → its *storeWatch
