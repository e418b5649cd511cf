package sqlfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlfence"
	"github.com/leasehold/leasehold/store"
)

// TestValidateTable: table names follow storekit's one SQL identifier rule,
// per part of schema.table; bad input is refused with an error that matches
// fence.ErrInvalid and store.ErrInvalid and names what was wrong. The good
// names are the negative control: the check does not refuse everything.
func TestValidateTable(t *testing.T) {
	for _, name := range []string{
		"leasehold_fence", "Fences", "_t", "t1", "app.leasehold_fence", "App_1.T_2",
		strings.Repeat("a", 63), strings.Repeat("s", 63) + "." + strings.Repeat("t", 63),
	} {
		if err := sqlfence.ValidateTable(name); err != nil {
			t.Errorf("ValidateTable(%q) = %v, want nil", name, err)
		}
	}
	for _, c := range []struct{ name, says string }{
		{"", `table name is empty`},
		{"x; DROP TABLE y", `table name "x; DROP TABLE y" is not a plain SQL identifier`},
		{`"quoted"`, `table name "\"quoted\"" is not a plain SQL identifier`},
		{"1abc", `table name "1abc" is not a plain SQL identifier`},
		{"has space", `table name "has space" is not a plain SQL identifier`},
		{"a-b", `table name "a-b" is not a plain SQL identifier`},
		{"tablé", `is not a plain SQL identifier`},
		{strings.Repeat("a", 64), `is 64 bytes, the limit is 63`},
		{"a.b.c", `table name "a.b.c" has more than one '.'`},
		{".t", `schema name is empty`},
		{"s.", `table name is empty`},
		{"1s.t", `schema name "1s" is not a plain SQL identifier`},
		{"s.t;", `table name "t;" is not a plain SQL identifier`},
		{strings.Repeat("s", 64) + ".t", `schema name "` + strings.Repeat("s", 64) + `" is 64 bytes, the limit is 63`},
	} {
		err := sqlfence.ValidateTable(c.name)
		if !errors.Is(err, fence.ErrInvalid) || !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ValidateTable(%q) = %v, want an error matching fence.ErrInvalid and store.ErrInvalid", c.name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "leasehold/sqlfence: invalid argument: ") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ValidateTable(%q) = %q, want it to begin leasehold/sqlfence: invalid argument: and say %q", c.name, err, c.says)
		}
	}
	// New names the Config field that was wrong.
	_, err := sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite, LeaseTable: "a.b.c"})
	if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "leasehold/sqlfence: Config.LeaseTable: invalid argument: ") {
		t.Errorf("New with LeaseTable a.b.c = %v, want fence.ErrInvalid naming Config.LeaseTable", err)
	}
	_, err = sqlfence.New(sqlfence.Config{Dialect: sqlfence.SQLite, Table: "x y"})
	if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "leasehold/sqlfence: Config.Table: invalid argument: ") {
		t.Errorf("New with Table \"x y\" = %v, want fence.ErrInvalid naming Config.Table", err)
	}
}
