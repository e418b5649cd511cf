package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testenv"
)

// newTestRegister makes a register of kind on a resource "r" for the test,
// removed when it ends.
func newTestRegister(t *testing.T, kind string, fenced bool) register {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var reg register
	var err error
	switch kind {
	case registerHTTP:
		reg, err = newHTTPRegister([]string{"r"}, fenced)
	case registerSQLite:
		reg, err = newSQLiteRegister(ctx, filepath.Join(t.TempDir(), "register.db"), "register", []string{"r"}, fenced)
	case registerPostgres:
		addr := testenv.Env("LEASEHOLD_PG_ADDR", "127.0.0.1:5432")
		testenv.RequireTCP(t, "PostgreSQL", addr, "start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth, database test)")
		dsn := fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", addr)
		var b [4]byte
		rand.Read(b[:])
		schema := "chaos_reg_" + hex.EncodeToString(b[:])
		admin, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect to PostgreSQL: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
				t.Logf("drop schema %s: %v", schema, err)
			}
			admin.Close(ctx)
		})
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatalf("create schema: %v", err)
		}
		reg, err = newPGRegister(ctx, dsn, schema+".reg", []string{"r"}, fenced, false)
		if err != nil {
			t.Fatalf("create the register: %v", err)
		}
	default:
		t.Fatalf("unknown register kind %q", kind)
	}
	if err != nil {
		t.Fatalf("create the %s register: %v", kind, err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	return reg
}

// The register identifies a term by (token, writer), as the fence does: a
// higher token is admitted from anyone, the same token only from the writer
// it was admitted for. A number-only register (last_token <= $token) admits
// n2's token 3 after n1's, two terms with one token: the second step fails.
func TestRegisterRefusesEqualTokenOtherHolder(t *testing.T) {
	for _, kind := range []string{registerSQLite, registerPostgres, registerHTTP} {
		t.Run(kind, func(t *testing.T) {
			reg := newTestRegister(t, kind, true)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := openRegisterClient(ctx, reg.spec())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			steps := []struct {
				writer string
				token  int64
				accept bool
			}{
				{"n1.0", 3, true},
				{"n2.0", 3, false}, // token 3 granted again, to another term
				{"n1.0", 3, true},  // n1's term writes again
				{"n2.0", 4, true},
				{"n1.0", 4, false},
				{"n1.0", 2, false},
			}
			var want []registerEntry
			for i, s := range steps {
				value := fmt.Sprintf("%s#%d", s.writer, i)
				ok, err := c.Write(ctx, "r", s.token, value, s.writer)
				if err != nil {
					t.Fatalf("step %d: write token %d from %s: %v", i, s.token, s.writer, err)
				}
				if ok != s.accept {
					t.Fatalf("step %d: write token %d from %s: accepted %v, want %v", i, s.token, s.writer, ok, s.accept)
				}
				if ok {
					want = append(want, registerEntry{Resource: "r", Token: s.token, Value: value, Writer: s.writer})
				}
			}
			v, tok, err := reg.Read(ctx, "r")
			if err != nil || v != "n2.0#3" || tok != 4 {
				t.Errorf("read = %q, %d, %v; want n2.0#3, 4", v, tok, err)
			}
			// The log holds exactly the accepted writes, in order.
			log, err := reg.Log(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []registerEntry
			for _, e := range log {
				if e.Result == writeAccepted {
					got = append(got, registerEntry{Resource: e.Resource, Token: e.Token, Value: e.Value, Writer: e.Writer})
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("accepted log = %v, want %v", got, want)
			}
			// A write that does not say whose term it is could be either:
			// bad input (the HTTP register's Guard answers 503 for it).
			switch _, err := c.Write(ctx, "r", 5, "anonymous", ""); {
			case err == nil:
				t.Error("a write with no writer was not refused")
			case kind != registerHTTP && !errors.Is(err, ErrInvalid):
				t.Errorf("a write with no writer: %v, want ErrInvalid", err)
			}
		})
	}
}

// The negative control: an unfenced register (--unfenced) accepts every
// write, the equal token from another writer and the lower token included,
// so the run's checker has something to catch.
func TestRegisterUnfencedAcceptsEverything(t *testing.T) {
	for _, kind := range []string{registerSQLite, registerPostgres, registerHTTP} {
		t.Run(kind, func(t *testing.T) {
			reg := newTestRegister(t, kind, false)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := openRegisterClient(ctx, reg.spec())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, w := range []struct {
				writer string
				token  int64
			}{{"n1.0", 3}, {"n2.0", 3}, {"n1.0", 2}} {
				ok, err := c.Write(ctx, "r", w.token, fmt.Sprintf("v%d", i), w.writer)
				if err != nil || !ok {
					t.Fatalf("unfenced write %d (token %d from %s) = %v, %v; want accepted", i, w.token, w.writer, ok, err)
				}
			}
		})
	}
}
