package store

import (
	"context"
	"net/url"
)

// Reach says how a process reaches a store's server, which tells the
// leasehold command's chaos harness (leasehold verify) whether it can put a
// fault proxy in front of it.
type Reach int

const (
	// ReachLocal: a file on this host (SQLite). Nothing to proxy, no
	// network faults.
	ReachLocal Reach = iota + 1
	// ReachNetwork: TCP endpoints, host:port, comma-separated, in the URL's
	// host. The harness proxies each one.
	ReachNetwork
	// ReachAPI: a server whose address is not in the URL (Kubernetes: the
	// kubeconfig or the pod names it). Not proxied; the harness cannot check
	// that it is on this host.
	ReachAPI
)

// Descriptor says what the leasehold command, its chaos harness and the
// documentation need to know about a store that is opened by URL. Each store
// package exports one (as Descriptor); package store/registry lists them.
// Adding a store is its package plus one line there.
type Descriptor struct {
	// Name is the store's name in messages and the README: "PostgreSQL".
	Name string
	// Schemes are the URL schemes it opens, the usual one first.
	Schemes []string
	// Open opens the store a URL names. Its errors never hold the URL's
	// password; bad input wraps ErrInvalid.
	Open func(ctx context.Context, u *url.URL) (Store, error)
	// ExampleURL is a short URL for help texts: "postgres://user@host/db".
	ExampleURL string
	// Reach is how the server is reached.
	Reach Reach
	// DefaultPort is the port of an endpoint that names none (ReachNetwork).
	DefaultPort string
	// Params are the store's own URL parameters, which the store removes
	// before it hands the rest of the URL to its driver (and which a plain
	// connection of that driver must not see).
	Params []string
	// AddrParams are URL parameters that name a server other than the URL's
	// host:port. The chaos harness refuses a URL that sets one: it proxies
	// only the URL's host.
	AddrParams []string
	// ReadOnly, if set, adjusts u so that opening it creates nothing (no
	// file, no table); it fails if there is nothing to open. Nil: opening
	// creates nothing anyway.
	ReadOnly func(u *url.URL) error
	// Creating, if set, adjusts u so that opening it creates what the store
	// needs (its table) unless the URL says otherwise. Nil: opening does so
	// anyway, or never needs to.
	Creating func(u *url.URL) error
	// Doc is the store's row in the README's table of stores.
	Doc Doc
}

// Doc is a store's row in the README's table of stores (generated from the
// registry: see store/registry).
type Doc struct {
	// README is the store's README, from the repository's root.
	README string
	// Note follows the name: "(the default)".
	Note string
	// URLs are the URL forms shown (Markdown code spans are added).
	URLs []string
	// Token is where the fencing token comes from.
	Token string
	// Expiry is whose clock judges expiry.
	Expiry string
	// Wake is how a waiter learns of a release.
	Wake string
	// Notes is the rest: what it suits, what it survives, what it
	// interoperates with.
	Notes string
}
