package kubernetes_test

import (
	"testing"

	"github.com/leasehold/leasehold/store"
	k8sstore "github.com/leasehold/leasehold/store/kubernetes"
	"github.com/leasehold/leasehold/store/storetest"
)

// TestConformance runs the store contract's suite against a real
// kube-apiserver, as the admin. Each subtest gets its own namespace; each
// handle is its own client, as separate processes would be.
func TestConformance(t *testing.T) {
	t.Parallel() // the suite mostly waits on leases
	srv := apiserver(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			ns := namespace(t)
			return func() (store.Store, error) {
				return k8sstore.New(storeConfig(t, srv.AdminConfig(), ns))
			}
		},
		MinTTL: k8sstore.MinTTL,
		Losses: kubernetesLosses(),
	})
}
