package mysql

import "time"

// QueuedNames is how many names the Store's poller would read queue heads
// for (when watched): the names with a place queued through it.
func QueuedNames(s *Store) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queued)
}

// Jitter is the poller's wait between two polls for a WatchInterval of d.
var Jitter = jitter

// SetPollWait replaces the wait the poller of s draws before each poll
// (jitter); call it before the first Watch.
func SetPollWait(s *Store, wait func(time.Duration) time.Duration) { s.poll.wait = wait }
