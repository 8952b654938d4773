package data

// QueuedCommits is the number of Commit calls waiting for the commit loop,
// so that tests can wait for a group to form instead of sleeping.
func QueuedCommits(s *Store) int { return len(s.reqs) }

// SetBootID replaces the kernel boot id Open compares session files with,
// for the rest of the test (a different id simulates a reboot).
func SetBootID(tb interface{ Cleanup(func()) }, id string) {
	old := bootID
	bootID = func() string { return id }
	tb.Cleanup(func() { bootID = old })
}
