// Package registry lists the stores the leasehold command opens by URL: one
// line per store, each the store package's own store.Descriptor. The
// command's --store, `leasehold verify` (the chaos harness) and the README's
// table of stores all come from this list.
//
// Adding a store is its package (with a descriptor.go that exports its
// Descriptor) plus one line in stores below; then run go generate here to
// update the README's table.
package registry

//go:generate go test . -run ^TestREADMEStoreTable$ -update

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/etcd"
	"github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/mysql"
	"github.com/leasehold/leasehold/store/nats"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/redis"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/store/zookeeper"
)

// stores are the registered stores, in the README's order.
var stores = []*store.Descriptor{
	&sqlite.Descriptor,
	&postgres.Descriptor,
	&mysql.Descriptor,
	&redis.Descriptor,
	&etcd.Descriptor,
	&zookeeper.Descriptor,
	&kubernetes.Descriptor,
	&nats.Descriptor,
}

var byScheme = func() map[string]*store.Descriptor {
	m := map[string]*store.Descriptor{}
	for _, d := range stores {
		for _, s := range d.Schemes {
			if _, dup := m[s]; dup {
				panic("store/registry: scheme " + s + " registered twice")
			}
			m[s] = d
		}
	}
	return m
}()

// All returns the registered stores, in the README's order.
func All() []*store.Descriptor { return append([]*store.Descriptor(nil), stores...) }

// Lookup returns the store that opens URLs of a scheme.
func Lookup(scheme string) (*store.Descriptor, bool) {
	d, ok := byScheme[scheme]
	return d, ok
}

// Schemes returns every registered scheme, sorted.
func Schemes() []string {
	out := make([]string, 0, len(byScheme))
	for s := range byScheme {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Examples returns one example URL per store, in the order of their first
// scheme, sorted.
func Examples() []string {
	ds := All()
	sort.Slice(ds, func(i, j int) bool { return ds[i].Schemes[0] < ds[j].Schemes[0] })
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ExampleURL
	}
	return out
}

// Open opens the store u names. An unknown scheme is an error wrapping
// store.ErrInvalid that lists the known ones.
func Open(ctx context.Context, u *url.URL) (store.Store, error) {
	d, ok := Lookup(u.Scheme)
	if !ok {
		return nil, unknownScheme(u.Scheme)
	}
	return d.Open(ctx, u)
}

// unknownScheme is the error for a scheme no store registered.
func unknownScheme(scheme string) error {
	return fmt.Errorf("%w: unknown store scheme %q; known: %s", store.ErrInvalid, scheme, strings.Join(Schemes(), ", "))
}
