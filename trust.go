package leasehold

import "time"

// trust is the safety arithmetic of one term, written once. Elector, Lock
// (through holding) and Keeper all keep a term's deadlines in a trust and
// change them only through its methods; TestTrustTable pins every rule.
//
//   - safeUntil is the send time of the latest successful acquire or renew
//     plus RenewDeadline, on the holder's own clock (SAFETY.md rule 6). It only
//     moves forward: a late answer to an earlier request cannot shorten it,
//     and nothing extends it but a successful request.
//   - The term's context is cancelled at cancelAt = safeUntil - WindDown, or
//     at holdEnd (the acquire's send time plus Config.MaxHold) if that is
//     earlier; nothing moves holdEnd.
//   - The next renewal is sent RenewInterval after the last successful one was
//     sent, or RetryPeriod after a failed one was sent.
type trust struct {
	safeUntil time.Time
	nextRenew time.Time
	holdEnd   time.Time // zero: no cap
}

// granted is the trust of a term whose acquire request was sent at sentAt
// and whose grant the store said has remaining left (store.Record.Remaining,
// on the store's clock when it answered). A store may grant a term shorter
// than LeaseDuration (etcd backing it with a lease it already holds): the
// shortfall LeaseDuration - remaining comes off both safeUntil and the next
// renewal, so the margin LeaseDuration - RenewDeadline stays whole, counted
// from the send time. A remaining of zero or less than the margin leaves no
// trust at all. A remaining above LeaseDuration changes nothing: safeUntil
// never counts from the store's answer.
func granted(t Timings, sentAt time.Time, remaining time.Duration) trust {
	short := max(t.LeaseDuration-remaining, 0)
	safe := max(t.RenewDeadline-short, 0)
	renew := max(t.RenewInterval-short, 0)
	return trust{safeUntil: sentAt.Add(safe), nextRenew: sentAt.Add(renew)}
}

// capHold caps the term at maxHold after its acquire request was sent at
// sentAt (no cap if maxHold is zero).
func (tr *trust) capHold(sentAt time.Time, maxHold time.Duration) {
	if maxHold > 0 {
		tr.holdEnd = sentAt.Add(maxHold)
	}
}

// renewed records a successful renewal sent at sentAt.
func (tr *trust) renewed(t Timings, sentAt time.Time) {
	if su := sentAt.Add(t.RenewDeadline); su.After(tr.safeUntil) {
		tr.safeUntil = su
	}
	tr.nextRenew = sentAt.Add(t.RenewInterval)
}

// renewFailed records a renewal sent at sentAt whose outcome is unknown: it
// is tried again a retry period after it was sent. safeUntil does not move.
func (tr *trust) renewFailed(t Timings, sentAt time.Time) {
	tr.nextRenew = sentAt.Add(t.RetryPeriod)
}

// cancelAt is when the term's context is cancelled.
func (tr trust) cancelAt(t Timings) time.Time {
	c := tr.safeUntil.Add(-t.WindDown)
	if !tr.holdEnd.IsZero() && tr.holdEnd.Before(c) {
		return tr.holdEnd
	}
	return c
}

// holdCapped reports whether cancelAt is the hold cap rather than safeUntil.
func (tr trust) holdCapped(t Timings) bool {
	return !tr.holdEnd.IsZero() && !tr.holdEnd.After(tr.safeUntil.Add(-t.WindDown))
}

// trusted reports whether the term may still be worked under at now.
func (tr trust) trusted(t Timings, now time.Time) bool { return now.Before(tr.cancelAt(t)) }
