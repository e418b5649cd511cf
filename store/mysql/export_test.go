package mysql

// QueuedNames is how many names the Store's poller would read queue heads
// for (when watched): the names with a place queued through it.
func QueuedNames(s *Store) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queued)
}

// Jitter is the poller's wait between two polls for a WatchInterval of d.
var Jitter = jitter
