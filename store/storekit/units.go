package storekit

import "time"

// CeilMillis is d in whole milliseconds, rounded up: a store that keeps
// expiry in milliseconds (Redis PX, SQLite) keeps a lease at least as long
// as asked, never shorter. It does not overflow for any d.
func CeilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}
