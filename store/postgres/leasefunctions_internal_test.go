package postgres

import (
	"errors"
	"fmt"
	"testing"
)

// driverErr is a database/sql driver's error that is not pgx's (lib/pq's
// *pq.Error has the same SQLState method).
type driverErr struct{ code, msg string }

func (e *driverErr) Error() string    { return "pq: " + e.msg }
func (e *driverErr) SQLState() string { return e.code }

// TestLeaseFunctionUnusable: which errors make the store send the statements
// themselves. Only a missing or foreign function (42883) and a refusal to
// execute the function do; a refusal on the table, an error raised inside
// the function and an error without a SQLSTATE do not (the caller gets them).
func TestLeaseFunctionUnusable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&driverErr{"42883", `function app.leader_lease_acquire(text, text, double precision, text, text) does not exist`}, true},
		{fmt.Errorf("wrapped: %w", &driverErr{"42883", "leasehold: lease function of version a called by version b"}), true},
		{&driverErr{"42501", "permission denied for function leader_lease_acquire"}, true},
		{&driverErr{"42501", "permission denied for table leader_lease"}, false},
		{&driverErr{"P0001", "function raised"}, false},
		{&driverErr{"42P01", `relation "app.leader_lease" does not exist`}, false},
		{errors.New("function does not exist"), false},
		{nil, false},
	} {
		if got := leaseFunctionUnusable(tc.err); got != tc.want {
			t.Errorf("leaseFunctionUnusable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
