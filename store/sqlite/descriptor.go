package sqlite

import (
	"fmt"
	"net/url"
	"os"

	"github.com/leasehold/leasehold/store"
)

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:       "SQLite",
	Schemes:    []string{"sqlite"},
	Open:       OpenURL,
	ExampleURL: "sqlite:///path/leases.db",
	Reach:      store.ReachLocal,
	Params:     []string{"table", "busy_timeout", "create"},
	ReadOnly:   readOnlyURL,
	Doc: store.Doc{
		README: "store/sqlite/README.md",
		Note:   "(the default)",
		URLs:   []string{"sqlite:///path/leases.db"},
		Token:  "`epoch` column, +1 per grant",
		Expiry: "SQLite's clock on the one host",
		Wake:   "its timer at expiry, or polling",
		Notes:  "processes of **one host**; pure Go, no server",
	},
}

// readOnlyURL makes u open an existing file only (create=false), and fails
// if there is none.
func readOnlyURL(u *url.URL) error {
	path, _, err := ParseURL(u)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no SQLite store at %s (%w); this command creates no store: check the path", path, err)
	}
	q := u.Query()
	q.Set("create", "false")
	u.RawQuery = q.Encode()
	return nil
}
