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

// SetDoorEvents has f told of every doorbell event of s ("held", "waiting",
// "rang", "quiet", "let-go"); call it before the first grant or Watch.
// It reports whether s keeps doorbells at all.
func SetDoorEvents(s *Store, f func(kind, name string)) bool {
	if s.bells == nil {
		return false
	}
	s.bells.events = f
	return true
}

// HeldDoorbells is how many doorbells s holds (or is taking) for terms
// granted through it.
func HeldDoorbells(s *Store) int {
	if s.bells == nil {
		return 0
	}
	s.bells.mu.Lock()
	defer s.bells.mu.Unlock()
	return len(s.bells.held)
}
