package data

// QueuedCommits is the number of Commit calls waiting for the commit loop,
// so that tests can wait for a group to form instead of sleeping.
func QueuedCommits(s *Store) int { return len(s.reqs) }
