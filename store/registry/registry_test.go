package registry

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// TestDescriptors checks each registered descriptor for what the command,
// the chaos harness and the README rely on.
func TestDescriptors(t *testing.T) {
	if len(All()) == 0 {
		t.Fatal("no stores registered")
	}
	for _, d := range All() {
		t.Run(d.Name, func(t *testing.T) {
			if d.Name == "" || len(d.Schemes) == 0 || d.Open == nil {
				t.Fatalf("descriptor %+v lacks a name, a scheme or an opener", d)
			}
			u, err := url.Parse(d.ExampleURL)
			if err != nil || !slices.Contains(d.Schemes, u.Scheme) {
				t.Errorf("example URL %q (%v) is not of a scheme of %s %q", d.ExampleURL, err, d.Name, d.Schemes)
			}
			for _, s := range d.Schemes {
				if got, ok := Lookup(s); !ok || got != d {
					t.Errorf("Lookup(%q) = %v, %v; want %s", s, got, ok, d.Name)
				}
			}
			switch d.Reach {
			case store.ReachNetwork:
				if d.DefaultPort == "" {
					t.Errorf("a network store needs a default port")
				}
			case store.ReachLocal, store.ReachAPI:
				if d.DefaultPort != "" || len(d.AddrParams) > 0 {
					t.Errorf("a store not reached over TCP has a default port %q or address parameters %q", d.DefaultPort, d.AddrParams)
				}
			default:
				t.Errorf("reach %d is none of ReachLocal, ReachNetwork, ReachAPI", d.Reach)
			}
			if _, err := os.Stat(filepath.Join("..", "..", d.Doc.README)); err != nil {
				t.Errorf("README: %v", err)
			}
			if len(d.Doc.URLs) == 0 || d.Doc.Token == "" || d.Doc.Expiry == "" || d.Doc.Wake == "" {
				t.Errorf("README row incomplete: %+v", d.Doc)
			}
		})
	}
}

func TestSchemesAndExamples(t *testing.T) {
	s := Schemes()
	if !sort.StringsAreSorted(s) {
		t.Errorf("Schemes() = %q, not sorted", s)
	}
	n := 0
	for _, d := range All() {
		n += len(d.Schemes)
	}
	if len(s) != n {
		t.Errorf("Schemes() has %d schemes, the descriptors %d", len(s), n)
	}
	for _, want := range []string{"sqlite", "postgres", "postgresql", "redis", "rediss", "etcd", "etcds", "kubernetes"} {
		if !slices.Contains(s, want) {
			t.Errorf("Schemes() = %q lacks %q", s, want)
		}
	}
	if e := Examples(); len(e) != len(All()) || !slices.Contains(e, "sqlite:///path/leases.db") {
		t.Errorf("Examples() = %q", e)
	}
}

func TestOpenUnknownScheme(t *testing.T) {
	_, err := Open(context.Background(), &url.URL{Scheme: "consul", Host: "127.0.0.1:8500"})
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), `"consul"`) || !strings.Contains(err.Error(), "sqlite") {
		t.Fatalf("Open(consul://) = %v; want ErrInvalid naming the scheme and the known ones", err)
	}
}

// TestReadOnlyURL: a read-only URL creates nothing.
func TestReadOnlyURL(t *testing.T) {
	sq, _ := Lookup("sqlite")
	missing := filepath.Join(t.TempDir(), "none.db")
	u := &url.URL{Scheme: "sqlite", Path: missing}
	if err := sq.ReadOnly(u); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("ReadOnly on a missing SQLite file = %v; want an error naming it", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("ReadOnly created %s", missing)
	}
	existing := filepath.Join(t.TempDir(), "leases.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	u = &url.URL{Scheme: "sqlite", Path: existing, RawQuery: "table=t"}
	if err := sq.ReadOnly(u); err != nil || u.Query().Get("create") != "false" || u.Query().Get("table") != "t" {
		t.Errorf("ReadOnly(%s) = %v, URL %s; want create=false and the table kept", existing, err, u)
	}

	for _, scheme := range []string{"postgres", "postgresql"} {
		pg, _ := Lookup(scheme)
		u := &url.URL{Scheme: scheme, Host: "127.0.0.1", Path: "/test", RawQuery: "create_if_missing=true&schema=s"}
		if err := pg.ReadOnly(u); err != nil || u.Query().Has("create_if_missing") || u.Query().Get("schema") != "s" {
			t.Errorf("ReadOnly = %v, URL %s; want create_if_missing gone, schema kept", err, u)
		}
		if err := pg.Creating(u); err != nil || u.Query().Get("create_if_missing") != "true" {
			t.Errorf("Creating = %v, URL %s; want create_if_missing=true", err, u)
		}
		u.RawQuery = "create_if_missing=false"
		if err := pg.Creating(u); err != nil || u.Query().Get("create_if_missing") != "false" {
			t.Errorf("Creating = %v, URL %s; want the URL's own create_if_missing=false kept", err, u)
		}
	}
}
