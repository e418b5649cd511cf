package postgres

import (
	"net/url"

	"github.com/leasehold/leasehold/store"
)

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "PostgreSQL",
	Schemes:     []string{"postgres", "postgresql"},
	Open:        OpenURL,
	ExampleURL:  "postgres://user@host/db",
	Reach:       store.ReachNetwork,
	DefaultPort: "5432",
	Params:      []string{ParamTable, ParamSchema, ParamCreateIfMissing, ParamWatch, ParamSessionHost, ParamSessionPort},
	AddrParams:  []string{"host", "port", ParamSessionHost, ParamSessionPort},
	ReadOnly: func(u *url.URL) error {
		q := u.Query()
		q.Del(ParamCreateIfMissing)
		u.RawQuery = q.Encode()
		return nil
	},
	Creating: func(u *url.URL) error {
		q := u.Query()
		if q.Get(ParamCreateIfMissing) == "" {
			q.Set(ParamCreateIfMissing, "true")
			u.RawQuery = q.Encode()
		}
		return nil
	},
	Doc: store.Doc{
		README: "store/postgres/README.md",
		URLs:   []string{"postgres://user@host/db?sslmode=verify-full"},
		Token:  "`epoch` of the `leader_lease` row",
		Expiry: "the database's `now()`",
		Wake:   "`LISTEN/NOTIFY` (~1 ms)",
		Notes:  "the plain-SQL recipe interoperates; batched renewal of thousands of leases; advisory-lock variant",
	},
}
