package registry

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the README's table of stores from the registry")

const (
	tableStart = "<!-- stores: generated from store/registry by `go generate ./store/registry`; edit the descriptors, not this table -->\n"
	tableEnd   = "<!-- end of stores -->\n"
)

// memstoreRow is the in-memory store's row: it has no URL, so the command
// cannot open it and it is not registered.
const memstoreRow = "| in-memory ([memstore](store/memstore)) | — | a counter | an injectable clock | a channel | the reference store and the unit-test double |\n"

// storeTable renders the README's table of stores from the registry.
func storeTable() string {
	var b strings.Builder
	b.WriteString("| store | URL (`--store`) | fencing token | expiry judged by | a waiter wakes on release by | notes |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, d := range All() {
		doc := d.Doc
		name := "[" + d.Name + "](" + doc.README + ")"
		if doc.Note != "" {
			name += " " + doc.Note
		}
		urls := make([]string, len(doc.URLs))
		for i, u := range doc.URLs {
			urls[i] = "`" + u + "`"
		}
		b.WriteString("| " + strings.Join([]string{name, strings.Join(urls, ", "), doc.Token, doc.Expiry, doc.Wake, doc.Notes}, " | ") + " |\n")
	}
	b.WriteString(memstoreRow)
	b.WriteString("\n")
	return b.String()
}

// TestREADMEStoreTable checks that the README's table of stores is the one
// the registry gives. go generate (go test -run TestREADMEStoreTable -update)
// rewrites it.
func TestREADMEStoreTable(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	i := strings.Index(readme, tableStart)
	j := strings.Index(readme, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no table of stores between the markers %q and %q", tableStart, tableEnd)
	}
	got, want := readme[i+len(tableStart):j], storeTable()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(readme[:i+len(tableStart)]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the table of stores in %s", path)
		return
	}
	t.Errorf("README.md's table of stores is not the registry's; run go generate ./store/registry\n got:\n%s\nwant:\n%s", got, want)
}

// TestStoreTableNegative: a registry change shows in the table (the check
// above can fail).
func TestStoreTableNegative(t *testing.T) {
	before := storeTable()
	old := stores[0].Doc.Token
	stores[0].Doc.Token = "changed"
	defer func() { stores[0].Doc.Token = old }()
	if storeTable() == before {
		t.Fatal("the table does not follow the descriptors")
	}
}
