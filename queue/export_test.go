package queue

// PauseEvents stops (or resumes) n's outcome event publisher, as if the
// instance were cut off from the event stream while it keeps deciding.
func PauseEvents(n *Node, paused bool) { n.events.paused.Store(paused) }
