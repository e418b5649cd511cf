package redis

import "time"

// SetHealthInterval sets the pub/sub health-check interval for a test, for
// stores opened after the call, and returns a function that restores it.
func SetHealthInterval(d time.Duration) (restore func()) {
	old := healthInterval
	healthInterval = d
	return func() { healthInterval = old }
}
