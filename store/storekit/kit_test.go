package storekit_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

var kit = storekit.Kit{Store: "teststore", MinTTL: 10 * time.Millisecond}

func TestInvalid(t *testing.T) {
	err := kit.Invalid("open", "busy timeout %v is negative", -time.Second)
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Invalid: %v does not match store.ErrInvalid", err)
	}
	if want := "leasehold/teststore: open: invalid argument: busy timeout -1s is negative"; err.Error() != want {
		t.Errorf("Invalid = %q, want %q", err, want)
	}
	if errors.Is(err, store.ErrHeld) {
		t.Errorf("Invalid matches ErrHeld")
	}
	// A cause wrapped with %w stays matchable.
	err = kit.Invalid("", "password file: %w", fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Invalid with %%w: %v does not match both ErrInvalid and the cause", err)
	}
	if want := "leasehold/teststore: invalid argument: password file: file does not exist"; err.Error() != want {
		t.Errorf("Invalid without op = %q, want %q", err, want)
	}
}

func TestWrap(t *testing.T) {
	if kit.Wrap("get", nil) != nil {
		t.Errorf("Wrap(nil) is not nil")
	}
	err := kit.Wrap(`get "job"`, store.ErrNotFound)
	if !errors.Is(err, store.ErrNotFound) || err.Error() != `leasehold/teststore: get "job": leasehold: lease not found` {
		t.Errorf("Wrap = %v", err)
	}
	err = kit.Errorf("list", "scan: %w", context.DeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "leasehold/teststore: list: scan: context deadline exceeded" {
		t.Errorf("Errorf = %v", err)
	}
}

// The checks report package store's rules in the kit's one form, without
// the store package's own "leasehold: invalid argument" in the middle.
func TestChecks(t *testing.T) {
	good := store.Term{Name: "job", Holder: "node-a", Token: 1}
	cases := []struct {
		name string
		err  error
		want string // the whole message
	}{
		{"acquire empty name", kit.CheckAcquire("", "h", time.Second, ""), "leasehold/teststore: acquire: invalid argument: lease name is empty"},
		{"acquire short ttl", kit.CheckAcquire("job", "h", time.Millisecond, ""), "leasehold/teststore: acquire: invalid argument: ttl 1ms is below this store's minimum 10ms"},
		{"acquire holder", kit.CheckAcquire("job", "a b", time.Second, ""), `leasehold/teststore: acquire: invalid argument: holder identity "a b" has byte 0x20 at 1; allowed is printable ASCII without spaces`},
		{"acquire metadata", kit.CheckAcquire("job", "h", time.Second, strings.Repeat("m", store.MaxMetadataLen+1)), "leasehold/teststore: acquire: invalid argument: metadata is 1025 bytes, the limit is 1024"},
		{"renew token", kit.CheckRenew(store.Term{Name: "job", Holder: "h"}, time.Second), "leasehold/teststore: renew: invalid argument: token 0 is below 1"},
		{"renew ttl", kit.CheckRenew(good, 0), "leasehold/teststore: renew: invalid argument: ttl 0s is not positive"},
		{"release", kit.CheckRelease(store.Term{Name: "/x", Holder: "h", Token: 1}), `leasehold/teststore: release: invalid argument: lease name "/x" starts with '/'`},
		{"get", kit.CheckName("get", "a b"), `leasehold/teststore: get: invalid argument: lease name "a b" has ' ' at byte 1; allowed are letters, digits, '-', '_', '.', '/'`},
		{"renew many", kit.CheckTTL("renew", -time.Second), "leasehold/teststore: renew: invalid argument: ttl -1s is not positive"},
		{"holder", kit.CheckHolder("advisory lock", ""), "leasehold/teststore: advisory lock: invalid argument: holder identity is empty"},
		{"metadata", kit.CheckMetadata("advisory lock", strings.Repeat("m", 2000)), "leasehold/teststore: advisory lock: invalid argument: metadata is 2000 bytes, the limit is 1024"},
		{"term", kit.CheckTerm("force-release", store.Term{Holder: "h", Token: 1}), "leasehold/teststore: force-release: invalid argument: lease name is empty"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, store.ErrInvalid) {
			t.Errorf("%s: %v does not match ErrInvalid", c.name, c.err)
			continue
		}
		if c.err.Error() != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.err, c.want)
		}
	}
	// Negative control: good arguments pass every check.
	for _, err := range []error{
		kit.CheckAcquire("job", "node-a", time.Second, "meta"),
		kit.CheckRenew(good, kit.MinTTL),
		kit.CheckRelease(good),
		kit.CheckName("get", "a/b.c-d_e"),
		kit.CheckTTL("renew", time.Hour),
		kit.CheckHolder("x", "node-a"),
		kit.CheckMetadata("x", ""),
	} {
		if err != nil {
			t.Errorf("a good argument was refused: %v", err)
		}
	}
}

func TestSQLIdent(t *testing.T) {
	for _, ok := range []string{"leader_lease", "_x", "t1", strings.Repeat("a", 63)} {
		if err := kit.SQLIdent("open", "table", ok, 0); err != nil {
			t.Errorf("SQLIdent(%q): %v", ok, err)
		}
	}
	for _, c := range []struct {
		name string
		max  int
		want string
	}{
		{"", 0, "table name is empty"},
		{"Leases", 0, "not a plain SQL identifier"},
		{"1t", 0, "not a plain SQL identifier"},
		{"x; DROP TABLE y", 0, "not a plain SQL identifier"},
		{`a"b`, 0, "not a plain SQL identifier"},
		{"a.b", 0, "not a plain SQL identifier"},
		{strings.Repeat("a", 64), 0, "64 bytes, the limit is 63"},
		{strings.Repeat("a", 56), 55, "56 bytes, the limit is 55"},
		{strings.Repeat("a", 64), 100, "64 bytes, the limit is 63"},
	} {
		err := kit.SQLIdent("open", "table", c.name, c.max)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SQLIdent(%q, %d) = %v, want ErrInvalid saying %q", c.name, c.max, err, c.want)
		}
	}
	// SQLite ignores case: upper case passes there, and only there.
	if err := kit.SQLIdentFold("open", "table", "My_Leases", 0); err != nil {
		t.Errorf("SQLIdentFold(My_Leases): %v", err)
	}
	for _, bad := range []string{"My-Leases", "1T", "", strings.Repeat("A", 64)} {
		if err := kit.SQLIdentFold("open", "table", bad, 0); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SQLIdentFold(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestCeilMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{999 * time.Microsecond, 1},
		{1500 * time.Millisecond, 1500},
		{0, 0},
		{time.Duration(1<<63 - 1), (1<<63-1)/int64(time.Millisecond) + 1},
	} {
		if got := storekit.CeilMillis(c.d); got != c.want {
			t.Errorf("CeilMillis(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestTableErrors(t *testing.T) {
	kit := storekit.Kit{Store: "mysql"}
	errNotMigrated := errors.New("not migrated")
	for _, c := range []struct {
		err  error
		want string
	}{
		{kit.NoTable("acquire", "Table 'x.leases' doesn't exist", "leases", errNotMigrated),
			"leasehold/mysql: acquire: Table 'x.leases' doesn't exist (table leases): not migrated; create it with `leasehold migrate`, (*mysql.Store).Migrate, or Options.CreateIfMissing"},
		{kit.NoTable("listen", "", "leases", errNotMigrated),
			"leasehold/mysql: listen: table leases does not exist: not migrated; create it with `leasehold migrate`, (*mysql.Store).Migrate, or Options.CreateIfMissing"},
		{kit.OldTable("renew", "Unknown column 'epoch'", "leases", errNotMigrated),
			"leasehold/mysql: renew: Unknown column 'epoch': table leases is not a migrated lease table: not migrated; `leasehold migrate` or (*mysql.Store).Migrate adds what is missing"},
	} {
		if !errors.Is(c.err, errNotMigrated) || c.err.Error() != c.want {
			t.Errorf("got %q (matching ErrNotMigrated: %v), want %q", c.err, errors.Is(c.err, errNotMigrated), c.want)
		}
	}
}
