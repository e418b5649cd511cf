package sqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence/pgxfence"
)

// TestPostgresPropertyRandomInterleavings_FailsWithoutTokenCheck drives
// several transactions on separate connections through a random interleaving
// (seeded, so a failure replays) of begin, claim, commit and rollback, with
// tokens drawn around the current highest and holders drawn from two (so a
// token is often presented by both, as after a lease store lost data), and
// checks each step against a model of the fence:
//
//   - a claim that gets the row is admitted exactly when its token is above
//     the highest committed token, or equal to it with the holder that
//     committed it; a refusal reports that highest, and matches
//     fence.ErrTokenReused exactly when its token equals it;
//   - a claim is never admitted while another open transaction holds the row;
//   - in the end, committed writes are in non-decreasing token order, writes
//     with one token all come from one holder, every refused or rolled-back
//     attempt left no trace, and the fence row holds the highest committed
//     term (token and holder).
//
// A claim that blocks is run in a goroutine; the driver waits (polling the
// server) until every running claim has either answered or is waiting on a
// lock before taking the next step.
func TestPostgresPropertyRandomInterleavings_FailsWithoutTokenCheck(t *testing.T) {
	e := newPgEnv(t)
	const slots = 4
	conns := make([]*pgx.Conn, slots)
	for i := range conns {
		conns[i] = pgConnect(t)
	}
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runInterleaving(t, e, conns, uint64(seed), 40)
		})
	}
}

type slotState int

const (
	idle    slotState = iota
	open              // in a transaction, not yet admitted
	pending           // a claim is running
	holding           // admitted: holds the fence row
)

type slot struct {
	conn    *pgx.Conn
	state   slotState
	tx      pgx.Tx
	token   int64
	holder  string
	attempt string
	res     chan error
}

func runInterleaving(t *testing.T, e *pgEnv, conns []*pgx.Conn, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	resource := fmt.Sprintf("prop-%d", seed)
	var committedHighest int64 // the model: highest token committed on the row
	var committedHolder string // and the holder that committed it
	holder := -1               // the slot the model says holds the row
	committed := map[string]int64{}
	holderOf := map[string]string{} // attempt -> holder
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format+"\nsteps:\n%v", append(append([]any{seed}, args...), log)...)
	}
	ss := make([]*slot, len(conns))
	for i, c := range conns {
		ss[i] = &slot{conn: c}
	}

	// settle waits until each running claim has answered or waits on a lock,
	// and checks each answer against the model.
	settle := func() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			busy := false
			for i, s := range ss {
				if s.state != pending {
					continue
				}
				select {
				case err := <-s.res:
					log = append(log, fmt.Sprintf("slot %d claim %d/%s -> %v", i, s.token, s.holder, err))
					// A refusal may be read after a later admission (it rolled
					// back at once), but two admissions never overlap.
					if err == nil && holder != -1 {
						fail("slot %d's claim was admitted while slot %d holds the row", i, holder)
					}
					want := s.token > committedHighest || s.token == committedHighest && s.holder == committedHolder
					var se *fence.StaleError
					switch {
					case err == nil && want:
						s.state, holder = holding, i
					case errors.As(err, &se) && !want:
						if se.Highest != committedHighest {
							fail("refusal reports highest %d, model %d", se.Highest, committedHighest)
						}
						if errors.Is(err, fence.ErrTokenReused) != (s.token == committedHighest) {
							fail("refusal of %d/%s with highest %d/%s: ErrTokenReused %v", s.token, s.holder, committedHighest, committedHolder, errors.Is(err, fence.ErrTokenReused))
						}
						if s.tx.Commit(ctx) == nil {
							fail("slot %d: refused transaction could commit", i)
						}
						s.state = idle
					default:
						fail("slot %d: claim %d/%s with committed highest %d/%s: %v", i, s.token, s.holder, committedHighest, committedHolder, err)
					}
				default:
					if !e.lockWaiting(t, s.conn.PgConn().PID()) {
						busy = true
					}
				}
			}
			if !busy {
				return
			}
			if time.Now().After(deadline) {
				fail("claims neither answered nor waited")
			}
			time.Sleep(time.Millisecond) // poll interval
		}
	}

	end := func(i int, commit bool) {
		s := ss[i]
		var err error
		if commit {
			if _, err = s.tx.Exec(ctx, `INSERT INTO `+e.t("writes")+` (attempt, token) VALUES ($1, $2)`, s.attempt, s.token); err == nil {
				err = s.tx.Commit(ctx)
			}
		} else {
			err = s.tx.Rollback(ctx)
		}
		log = append(log, fmt.Sprintf("slot %d token %d commit=%v -> %v", i, s.token, commit, err))
		if err != nil {
			fail("slot %d end: %v", i, err)
		}
		if s.state == holding {
			holder = -1
			if commit {
				committedHighest, committedHolder = s.token, s.holder
				committed[s.attempt] = s.token
			}
		}
		s.state = idle
	}

	for step := 0; step < steps; step++ {
		i := rng.IntN(len(ss))
		s := ss[i]
		switch s.state {
		case idle:
			var err error
			if s.tx, err = s.conn.Begin(ctx); err != nil {
				fail("begin: %v", err)
			}
			s.token = max(1, committedHighest+int64(rng.IntN(5))-2)
			s.holder = fmt.Sprintf("node-%d", rng.IntN(2))
			s.attempt = fmt.Sprintf("%d-%d-%d", seed, step, i)
			holderOf[s.attempt] = s.holder
			if _, err := s.tx.Exec(ctx, `INSERT INTO `+e.t("attempts")+` VALUES ($1, $2)`, s.attempt, s.token); err != nil {
				fail("attempt row: %v", err)
			}
			s.state = open
			log = append(log, fmt.Sprintf("slot %d begin term %d/%s", i, s.token, s.holder))
		case open:
			if rng.IntN(5) == 0 {
				end(i, false)
				break
			}
			s.state, s.res = pending, make(chan error, 1)
			tx, tok, h := s.tx, s.token, s.holder
			go func() { s.res <- e.fence.Claim(ctx, pgxfence.Tx(tx), resource, h, tok) }()
			log = append(log, fmt.Sprintf("slot %d claim %d started", i, s.token))
		case holding:
			switch rng.IntN(4) {
			case 0:
				end(i, false)
			case 1: // the same term claims again: admitted at once
				if err := e.fence.Claim(ctx, pgxfence.Tx(s.tx), resource, s.holder, s.token); err != nil {
					fail("slot %d re-claim of its own token %d: %v", i, s.token, err)
				}
			default:
				end(i, true)
			}
		case pending:
		}
		settle()
	}
	// Wind down: end every open transaction until all are idle.
	for {
		done := true
		for i, s := range ss {
			switch s.state {
			case open:
				end(i, false)
			case holding:
				end(i, rng.IntN(2) == 0)
			}
			settle()
			if s.state != idle {
				done = false
			}
		}
		if done {
			break
		}
	}

	// The committed writes of this seed, in lock order.
	rows, err := e.admin.Query(ctx, `SELECT w.attempt, w.token FROM `+e.t("writes")+` w WHERE w.attempt LIKE $1 ORDER BY seq`, fmt.Sprintf("%d-%%", seed))
	if err != nil {
		fail("%v", err)
	}
	defer rows.Close()
	var toks []int64
	var attempts []string
	for rows.Next() {
		var a string
		var tok int64
		if err := rows.Scan(&a, &tok); err != nil {
			fail("%v", err)
		}
		attempts, toks = append(attempts, a), append(toks, tok)
	}
	if err := rows.Err(); err != nil {
		fail("%v", err)
	}
	if i, ok := nonDecreasing(toks); !ok {
		fail("committed write %d has token %d after %d", i, toks[i], toks[i-1])
	}
	for i := 1; i < len(toks); i++ {
		if toks[i] == toks[i-1] && holderOf[attempts[i]] != holderOf[attempts[i-1]] {
			fail("committed writes %d and %d both have token %d, from %s and %s: two terms admitted with one token",
				i-1, i, toks[i], holderOf[attempts[i-1]], holderOf[attempts[i]])
		}
	}
	var n int
	e.admin.QueryRow(ctx, `SELECT count(*) FROM `+e.t("attempts")+` WHERE attempt LIKE $1`, fmt.Sprintf("%d-%%", seed)).Scan(&n)
	if n != len(committed) || len(toks) != len(committed) {
		fail("%d attempt rows and %d write rows committed, model %d: a refused or rolled-back attempt left a trace", n, len(toks), len(committed))
	}
	if h, hh := e.fenceTerm(t, resource); h != committedHighest || hh != committedHolder {
		fail("fence row %d/%s, model %d/%s", h, hh, committedHighest, committedHolder)
	}
}
