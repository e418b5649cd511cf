package postgres

import (
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
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
	Params:      []string{ParamTable, ParamSchema, ParamCreateIfMissing, ParamWatch, ParamSessionHost, ParamSessionPort, ParamPrepared},
	AddrParams:  []string{"host", "port", ParamSessionHost, ParamSessionPort},
	ReadOnly:    storekit.WithoutParam(ParamCreateIfMissing),
	Creating:    storekit.DefaultParam(ParamCreateIfMissing, "true"),
	Doc: store.Doc{
		README: "store/postgres/README.md",
		URLs:   []string{"postgres://user@host/db?sslmode=verify-full"},
		Token:  "`epoch` of the `leader_lease` row",
		Expiry: "the database's `now()`",
		Wake:   "`LISTEN/NOTIFY` (~1 ms)",
		Notes:  "the plain-SQL recipe interoperates; batched renewal of thousands of leases; advisory-lock variant",
	},
}
