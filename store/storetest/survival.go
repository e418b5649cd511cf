package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// Loss is one way a store can lose (or be made to lose) what it keeps of a
// lease, as its README describes: Redis's FLUSHALL or a restart without
// persistence, a lease row deleted by hand, a Kubernetes Lease deleted. A
// Harness offers the losses its store's README speaks of in Harness.Losses,
// and the suite's TokensSurviveLoss case checks each against what the README
// claims.
//
// Wired today: Redis (the lease's keys deleted; tokens=server_time survives
// it, tokens=counter only detects it), SQLite (INSERT OR REPLACE by hand, a
// row deleted past its trigger), Kubernetes (the Lease deleted; the Lease and
// its high-water mark deleted). PostgreSQL: its harness adds its own (a row
// DELETEd, the table TRUNCATEd, epoch lowered by UPDATE), each with the claim
// its README makes. The in-memory store offers none: it loses nothing short
// of the process, and the case is skipped.
type Loss struct {
	// Name says what is lost, for the subtest's name: "FLUSHALL",
	// "row deleted past the triggers".
	Name string
	// Lose makes the store lose lease name on the data open (the function
	// New returned) reaches. Terms of name have been granted and released
	// before; none is live. Lose fails the test itself if it cannot do what
	// it says (a Redis that refuses FLUSHALL). An error it returns means the
	// store refused the loss (a trigger that refuses a DELETE): the check
	// then logs it and checks the tokens all the same.
	Lose func(t *testing.T, open func() (store.Store, error), name string) error
	// Survives is the README's claim. True: after the loss, the next grant of
	// name, by a new handle that saw nothing before, is above every token
	// granted before it. False: the store cannot keep its tokens across this
	// loss; the check then asserts the weaker claim every store makes (see
	// SAFETY.md, rule 2): a handle that saw the earlier tokens never grants
	// one at or below them (it may refuse once, reporting the regress, and
	// must grant above them on the next call).
	Survives bool
}

// survivalName is the lease the survival check loses.
const survivalName = "survivor"

// testTokensSurviveLoss runs one subtest per Loss the harness offers.
func testTokensSurviveLoss(s *suite) {
	if len(s.h.Losses) == 0 {
		s.t.Skip("the harness offers no data loss (Harness.Losses): nothing of this store's can be lost short of losing the process")
	}
	for _, loss := range s.h.Losses {
		if loss.Name == "" || loss.Lose == nil {
			s.t.Fatalf("storetest: Loss %+v needs a Name and Lose", loss)
		}
		s.t.Run(loss.Name, func(t *testing.T) {
			sub := &suite{h: s.h, open: s.h.New(t), t: t}
			checkSurvival(sub, loss)
		})
	}
}

// checkSurvival grants and releases a few terms of one lease, to two
// holders, makes the store lose the lease, and checks the next grants
// against what the loss claims.
func checkSurvival(s *suite, loss Loss) {
	seer := s.store() // the handle that sees every token granted before the loss
	var highest int64
	for i, holder := range []string{"node-a", "node-b", "node-a"} {
		rec := s.acquire(seer, survivalName, holder, s.longTTL())
		if rec.Token <= highest {
			s.t.Fatalf("grant %d before the loss: token %d, not above %d", i+1, rec.Token, highest)
		}
		highest = rec.Token
		if err := seer.Release(s.ctx(), rec.Term); err != nil {
			s.t.Fatalf("Release(%v): %v", rec.Term, err)
		}
	}

	if err := loss.Lose(s.t, s.open, survivalName); err != nil {
		s.t.Logf("the store refused the loss %q: %v", loss.Name, err)
	}

	if loss.Survives {
		fresh := s.store() // a process started after the loss: it remembers nothing
		rec, err := fresh.Acquire(s.ctx(), survivalName, "node-fresh", s.longTTL(), "")
		if err != nil {
			s.t.Fatalf("after %s, a new handle's Acquire: %v", loss.Name, err)
		}
		if rec.Token <= highest {
			s.t.Fatalf("after %s, a new handle was granted token %d, not above %d granted before: the store's tokens did not survive the loss its README says they survive", loss.Name, rec.Token, highest)
		}
		if err := fresh.Release(s.ctx(), rec.Term); err != nil {
			s.t.Fatalf("Release(%v): %v", rec.Term, err)
		}
		highest = rec.Token
	}

	// Every store: the handle that saw the earlier tokens never grants one
	// at or below them. It may refuse once (the regress it detects).
	var refused error
	for attempt := 1; ; attempt++ {
		rec, err := seer.Acquire(s.ctx(), survivalName, "node-seer", s.longTTL(), "")
		if err == nil {
			if rec.Token <= highest {
				s.t.Fatalf("after %s, the handle that saw token %d was granted token %d", loss.Name, highest, rec.Token)
			}
			return
		}
		if errors.Is(err, store.ErrHeld) || attempt == 2 {
			s.t.Fatalf("after %s, the handle that saw token %d: Acquire attempt %d: %v (first refusal: %v)", loss.Name, highest, attempt, err, refused)
		}
		refused = fmt.Errorf("attempt %d: %w", attempt, err)
		s.t.Logf("after %s, the handle that saw token %d refused once: %v", loss.Name, highest, err)
	}
}
