package leasehold

// NaiveClaim makes s claim a period with any grant of its lease name,
// without checking that it is the first: the negative control of the
// scheduler's at-most-once tests.
func NaiveClaim(s *Scheduler) { s.naive = true }
