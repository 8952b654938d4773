package queue

import "time"

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
