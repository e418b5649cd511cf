package chaos

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/internal/faultproxy"
)

// proxy is the harness's TCP fault proxy (package faultproxy): one in front
// of each store endpoint for each node, so that every byte a node exchanges
// with the store passes through it.
type proxy = faultproxy.Proxy

// newProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port). A bad target matches ErrInvalid.
func newProxy(target string) (*proxy, error) {
	p, err := faultproxy.New(target)
	if errors.Is(err, faultproxy.ErrInvalid) {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return p, err
}
