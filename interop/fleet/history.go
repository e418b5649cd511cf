// Package fleet runs mixed fleets: leasehold nodes beside the peer libraries
// they interoperate with (client-go's LeaderElector, etcd's concurrency
// Mutex, bsm/redislock), on one lease, each through its own fault proxy, and
// checks what they did.
//
// The peers carry no fencing token, so the checks are about time, on this
// process's monotonic clock:
//
//   - Exclusion: no two participants lead at once. A leasehold node leads
//     from the moment its work starts until its work sees the term's context
//     end (at safeUntil, on loss or on release). A peer leads from the moment
//     its library says it leads until the earlier of the moment its own code
//     sees the loss and its own lease deadline, measured from the send of its
//     last successful acquire or renewal (the conservative end a careful user
//     of the peer would keep). How late each peer's own loss signal came
//     after that deadline is reported, and so are the overlaps there would be
//     if the peer were trusted until its loss signal.
//   - Fairness: a leasehold node that waits gets the lease within a bounded
//     number of peer terms begun while it waited and could reach the store
//     (its connection not under a lasting fault).
//
// A participant records into a Recorder; Check reads it. Faults (Faults)
// are put on the proxies while the fleet runs.
package fleet

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Role tells leasehold nodes from peers.
type Role int

const (
	// Peer is a participant running a peer library, with no token.
	Peer Role = iota
	// Leasehold is a leasehold node.
	Leasehold
)

func (r Role) String() string {
	if r == Leasehold {
		return "leasehold"
	}
	return "peer"
}

// Term is one leadership interval of one participant.
type Term struct {
	Who  string
	Kind string // "leasehold", "client-go", "etcd-mutex", "redislock"
	Role Role
	// Token is leasehold's fencing token (0 for peers).
	Token int64
	// Start is when the participant began to lead.
	Start time.Time
	// Lost is when the participant's own code saw the term end (loss,
	// safeUntil, or its own release); for a run that stopped while it led,
	// when the run stopped.
	Lost time.Time
	// Deadline is a peer's own lease deadline: the send time of its last
	// successful acquire or renewal plus its lease duration. Zero when
	// unknown and for leasehold nodes (whose Lost is at safeUntil at the
	// latest).
	Deadline time.Time
	// How says how the term ended: "released", "lost", "stopped".
	How string
	// Detail, for a leasehold term that was lost: the cause, and the
	// term's safeUntil then (a Lost much later than it is the recorder's
	// own delay in seeing the loss, not the node's trust).
	Detail string
}

// End is when the term ends for the checks: Lost, or Deadline if earlier.
func (t Term) End() time.Time {
	if !t.Deadline.IsZero() && t.Deadline.Before(t.Lost) {
		return t.Deadline
	}
	return t.Lost
}

// Wait is one stretch of a participant waiting to lead.
type Wait struct {
	Who   string
	Role  Role
	Start time.Time
	// End is when it began to lead, or when the run stopped.
	End time.Time
	// Won is true if the wait ended in a term.
	Won bool
}

// Recorder is the history of a fleet run. Its methods are safe for
// concurrent use.
type Recorder struct {
	mu     sync.Mutex
	origin time.Time
	terms  []*Term
	open   map[*Term]bool
	waits  []*Wait
	ended  bool
}

// NewRecorder starts a history.
func NewRecorder() *Recorder {
	return &Recorder{origin: time.Now(), open: map[*Term]bool{}}
}

// Waiting records that who begins to wait for the lease; call the returned
// function when the wait ends (won: it leads now).
func (r *Recorder) Waiting(who string, role Role) func(won bool) {
	w := &Wait{Who: who, Role: role, Start: time.Now()}
	r.mu.Lock()
	r.waits = append(r.waits, w)
	r.mu.Unlock()
	var once sync.Once
	return func(won bool) {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if w.End.IsZero() {
				w.End, w.Won = time.Now(), won
			}
		})
	}
}

// Begin records that who began to lead now.
func (r *Recorder) Begin(who, kind string, role Role, token int64) *Term {
	t := &Term{Who: who, Kind: kind, Role: role, Token: token, Start: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.terms = append(r.terms, t)
	r.open[t] = true
	return t
}

// SetDeadline records a peer's current own lease deadline for t. Later calls
// replace earlier ones (a renewal moves it).
func (r *Recorder) SetDeadline(t *Term, d time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open[t] {
		t.Deadline = d
	}
}

// End records that t ended at lost (when the participant saw it end), how.
// A term the run already closed keeps the run's stop time.
func (r *Recorder) End(t *Term, lost time.Time, how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open[t] {
		return
	}
	delete(r.open, t)
	t.Lost, t.How = lost, how
}

// SetDetail records what the checks' report says of t besides its span.
func (r *Recorder) SetDetail(t *Term, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Detail = detail
}

// Leader returns who leads now (the latest open term), or "".
func (r *Recorder) Leader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lead *Term
	for t := range r.open {
		if lead == nil || t.Start.After(lead.Start) {
			lead = t
		}
	}
	if lead == nil {
		return ""
	}
	return lead.Who
}

// Terms returns the number of terms begun so far by role.
func (r *Recorder) Terms(role Role) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.terms {
		if t.Role == role {
			n++
		}
	}
	return n
}

// Stop closes the history: open terms end now (How "stopped"), open waits
// end unwon. It returns a copy of the terms, by start time, and of the waits.
func (r *Recorder) Stop() ([]Term, []Wait) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.open {
		t.Lost, t.How = now, "stopped"
		delete(r.open, t)
	}
	for _, w := range r.waits {
		if w.End.IsZero() {
			w.End = now
		}
	}
	r.ended = true
	terms := make([]Term, len(r.terms))
	for i, t := range r.terms {
		terms[i] = *t
	}
	slices.SortFunc(terms, func(a, b Term) int { return a.Start.Compare(b.Start) })
	waits := make([]Wait, len(r.waits))
	for i, w := range r.waits {
		waits[i] = *w
	}
	return terms, waits
}

// Snapshot returns a copy of the terms so far, by start time, with open
// terms ending now, and of the waits, with open waits ending now.
func (r *Recorder) Snapshot() ([]Term, []Wait) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	terms := make([]Term, len(r.terms))
	for i, t := range r.terms {
		terms[i] = *t
		if r.open[t] {
			terms[i].Lost = now
		}
	}
	slices.SortFunc(terms, func(a, b Term) int { return a.Start.Compare(b.Start) })
	waits := make([]Wait, len(r.waits))
	for i, w := range r.waits {
		waits[i] = *w
		if w.End.IsZero() {
			waits[i].End = now
		}
	}
	return terms, waits
}

// Since is t as an offset from the recorder's start, for messages.
func (r *Recorder) Since(t time.Time) time.Duration {
	return t.Sub(r.origin).Round(time.Millisecond)
}

// Format lists terms as a timeline, for a failed test's log.
func (r *Recorder) Format(terms []Term) string {
	var b strings.Builder
	for _, t := range terms {
		fmt.Fprintf(&b, "  %8v..%-8v %-10s %-24s token %-18d %s", r.Since(t.Start), r.Since(t.End()), t.Kind, t.Who, t.Token, t.How)
		if !t.Deadline.IsZero() && t.Deadline.Before(t.Lost) {
			fmt.Fprintf(&b, " (own deadline %v, saw loss %v)", r.Since(t.Deadline), r.Since(t.Lost))
		}
		if t.Detail != "" {
			fmt.Fprintf(&b, " (%s)", t.Detail)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
