package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/faultstore"
	"github.com/leasehold/leasehold/store/memstore"
)

// storeImport is the import path of the store contract.
const storeImport = "github.com/leasehold/leasehold/store"

// A struct that embeds store.Store is a store.Store, but none of the optional
// capabilities of the store inside it: the elector finds no store.Watcher and
// polls, no store.BatchRenewer and renews one by one, no store.Limiter and
// skips the store's minimum lease. internal/cli once did exactly this (issue
// 14). The guard below reads every non-test Go file of the repository and
// refuses that shape anywhere, and holds every wrapper (a type with a
// store.Store field and the Store methods) to forwarding every optional
// interface the store package declares, now and as new ones are added.

// embedAllowlist names types allowed to embed store.Store: only types that
// declare every optional interface's methods themselves (checked below) and
// have a test proving the forwarding. It is empty, and should stay so.
var embedAllowlist = map[string]bool{}

// notForwarded lists, per wrapper, the optional interfaces it deliberately
// does not forward, with the reason. The capabilities the lease loop uses
// (loopCapabilities) may never appear here.
var notForwarded = map[string]map[string]string{
	// A fault-injecting test double: operators' capabilities are not what
	// its faults exercise, and it is never given to the CLI.
	"store/faultstore.Store": {
		"Lister": "test double", "ForceReleaser": "test double", "Migrator": "test double", "MigrationChecker": "test double", "Historian": "test double",
	},
	// A chaos node's recorder: the node runs an elector on it and calls no
	// operator's capability.
	"internal/chaos.recStore": {
		"Lister": "elector only", "ForceReleaser": "elector only", "Migrator": "elector only", "MigrationChecker": "elector only", "Historian": "elector only",
	},
}

// loopCapabilities are the optional interfaces the elector, lock and keeper
// look for: no wrapper may hide them.
var loopCapabilities = []string{"Watcher", "BatchRenewer", "Limiter", "Queuer", "UnqueuedAcquirer"}

type wrapperFinding struct {
	typ      string // dir.Type, relative to the repository root
	embedded bool
	methods  map[string]bool
}

// scanWrappers parses the Go files under root (tests excluded) and returns
// every struct type that has a store.Store field, embedded or named, with the
// methods its package declares on it, and the number of files parsed.
func scanWrappers(t *testing.T, root string) ([]wrapperFinding, int) {
	t.Helper()
	fset := token.NewFileSet()
	structs := map[string]*wrapperFinding{}
	methods := map[string]map[string]bool{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		// The name under which this file imports the store package ("" if it
		// does not); inside the store package itself, Store is unqualified.
		storeName := ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == storeImport {
				storeName = "store"
				if imp.Name != nil {
					storeName = imp.Name.Name
				}
			}
		}
		isStore := func(e ast.Expr) bool {
			if s, ok := e.(*ast.StarExpr); ok {
				e = s.X
			}
			switch x := e.(type) {
			case *ast.SelectorExpr:
				id, ok := x.X.(*ast.Ident)
				return ok && storeName != "" && id.Name == storeName && x.Sel.Name == "Store"
			case *ast.Ident:
				return rel == "store" && x.Name == "Store"
			}
			return false
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fld := range st.Fields.List {
						if !isStore(fld.Type) {
							continue
						}
						key := rel + "." + ts.Name.Name
						w := structs[key]
						if w == nil {
							w = &wrapperFinding{typ: key}
							structs[key] = w
						}
						if len(fld.Names) == 0 {
							w.embedded = true
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) != 1 {
					continue
				}
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if ix, ok := rt.(*ast.IndexExpr); ok {
					rt = ix.X
				}
				id, ok := rt.(*ast.Ident)
				if !ok {
					continue
				}
				key := rel + "." + id.Name
				if methods[key] == nil {
					methods[key] = map[string]bool{}
				}
				methods[key][d.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []wrapperFinding
	for key, w := range structs {
		w.methods = methods[key]
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].typ < out[j].typ })
	return out, files
}

// optionalInterfaces reads store/store.go's interface types other than Store,
// with their method names.
func optionalInterfaces(t *testing.T, root string) map[string][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "store", "store.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || ts.Name.Name == "Store" {
				continue
			}
			it, ok := ts.Type.(*ast.InterfaceType)
			if !ok {
				continue
			}
			for _, m := range it.Methods.List {
				for _, n := range m.Names {
					out[ts.Name.Name] = append(out[ts.Name.Name], n.Name)
				}
			}
		}
	}
	return out
}

// wrapperProblems applies the rules to the findings.
func wrapperProblems(found []wrapperFinding, optional map[string][]string) []string {
	var problems []string
	for _, w := range found {
		isWrapper := w.methods["Acquire"] && w.methods["Renew"] && w.methods["Release"] && w.methods["Get"]
		if w.embedded && !embedAllowlist[w.typ] {
			problems = append(problems, w.typ+" embeds store.Store: it hides every optional capability (Watcher, BatchRenewer, Limiter, ...) of the store inside; use a named field and hand the store itself on")
			continue
		}
		if !isWrapper && !w.embedded {
			continue // holds a store, is not one
		}
		for _, iface := range ifaceNames(optional) {
			for _, m := range optional[iface] {
				if w.methods[m] {
					continue
				}
				if _, ok := notForwarded[w.typ][iface]; ok && !contains(loopCapabilities, iface) {
					continue
				}
				problems = append(problems, w.typ+" wraps a store.Store but does not forward store."+iface+" (no method "+m+")")
			}
		}
	}
	return problems
}

func ifaceNames(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestNoStoreWrapperEmbedsStore(t *testing.T) {
	root := filepath.Join("..", "..")
	optional := optionalInterfaces(t, root)
	for _, want := range loopCapabilities {
		if len(optional[want]) == 0 {
			t.Fatalf("store/store.go declares no %s: the guard reads the wrong file", want)
		}
	}
	found, files := scanWrappers(t, root)
	if files < 50 {
		t.Fatalf("parsed only %d files: the guard is not reading the repository", files)
	}
	// The scan must see the wrappers it knows of, or it proves nothing.
	seen := map[string]bool{}
	for _, w := range found {
		seen[w.typ] = true
	}
	for _, want := range []string{"store/faultstore.Store", "internal/cli.openedStore"} {
		if !seen[want] {
			t.Errorf("the scan did not find %s, which has a store.Store field", want)
		}
	}
	for _, p := range wrapperProblems(found, optional) {
		t.Error(p)
	}
}

// TestWrapperGuardCatches is the negative control: the guard flags an
// embedding struct (with the import renamed, too), and a wrapper with a named
// field that forgets a capability the lease loop uses.
func TestWrapperGuardCatches(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/a.go", `package a
import "github.com/leasehold/leasehold/store"
type embeds struct {
	store.Store
	Name string
}
`)
	write("b/b.go", `package b
import st "github.com/leasehold/leasehold/store"
type renamed struct{ st.Store }
`)
	write("c/c.go", `package c
import "github.com/leasehold/leasehold/store"
type named struct{ inner store.Store }
func (n *named) Acquire() {}
func (n *named) Renew() {}
func (n *named) Release() {}
func (n *named) Get() {}
func (n *named) Watch() {}
func (n *named) RenewMany() {}
`)
	write("c/c_test.go", `package c
import "github.com/leasehold/leasehold/store"
type inTest struct{ store.Store }
`)
	optional := map[string][]string{"Watcher": {"Watch"}, "BatchRenewer": {"RenewMany"}, "Limiter": {"Limits"}}
	found, _ := scanWrappers(t, root)
	problems := strings.Join(wrapperProblems(found, optional), "\n")
	for _, want := range []string{"a.embeds embeds store.Store", "b.renamed embeds store.Store", "c.named wraps a store.Store but does not forward store.Limiter"} {
		if !strings.Contains(problems, want) {
			t.Errorf("the guard missed %q; it said:\n%s", want, problems)
		}
	}
	if strings.Contains(problems, "inTest") {
		t.Errorf("the guard reads test files:\n%s", problems)
	}
}

// noLimits is a store without the Limiter capability (the methods of
// store.Store only).
type noLimits struct{ store.Store }

// limitedMem is an in-memory store that declares Limits.
type limitedMem struct{ *memstore.Store }

func (limitedMem) Limits() store.Limits {
	return store.Limits{MinLeaseDuration: 1234 * time.Millisecond, TimeResolution: time.Second}
}

// TestFaultstoreForwardsCapabilities proves the forwarding the guard takes on
// faith from faultstore's method set: its Limits, Watch and RenewMany reach
// the store inside.
func TestFaultstoreForwardsCapabilities(t *testing.T) {
	inner := limitedMem{memstore.New()}
	var w store.Store = faultstore.New(inner)
	l, ok := w.(store.Limiter)
	if !ok || l.Limits() != inner.Limits() {
		t.Fatalf("faultstore does not forward Limits: %v %v", ok, l)
	}
	if l, ok := store.Store(faultstore.New(noLimits{memstore.New()})).(store.Limiter); !ok || l.Limits() != (store.Limits{}) {
		t.Fatalf("faultstore over a store without Limits: %v %+v", ok, l)
	}
	ctx := t.Context()
	if _, err := w.(store.Watcher).Watch(ctx, "x"); err != nil {
		t.Fatalf("Watch through faultstore: %v", err)
	}
	rec, err := w.Acquire(ctx, "x", "h", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	_, errs, err := w.(store.BatchRenewer).RenewMany(ctx, []store.Term{rec.Term}, time.Minute)
	if err != nil || errs[0] != nil {
		t.Fatalf("RenewMany through faultstore: %v %v", err, errs)
	}
}
