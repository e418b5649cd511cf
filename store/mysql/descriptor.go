package mysql

import (
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:        "MySQL/MariaDB",
	Schemes:     []string{"mysql", "mariadb"},
	Open:        OpenURL,
	ExampleURL:  "mysql://user@host:3306/db",
	Reach:       store.ReachNetwork,
	DefaultPort: "3306",
	Params:      Params,
	ReadOnly:    storekit.WithoutParam(ParamCreateIfMissing),
	Creating:    storekit.DefaultParam(ParamCreateIfMissing, "true"),
	Doc: store.Doc{
		README: "store/mysql/README.md",
		URLs:   []string{"mysql://user@host:3306/db?table=leader_lease"},
		Token:  "`epoch` of the `leader_lease` row",
		Expiry: "the database's `UTC_TIMESTAMP(6)`",
		Wake:   "a `GET_LOCK` doorbell, polling every 25 ms beneath (hand-off p50 3.5 ms)",
		Notes:  "MySQL 8.0+ and MariaDB 10.6+ (tested: MariaDB 10.11); batched renewal; `GET_LOCK` variant with a token",
	},
}
