package kubernetes

import "github.com/leasehold/leasehold/store"

// Descriptor describes this store to the leasehold command, its chaos
// harness and the README (see store/registry).
var Descriptor = store.Descriptor{
	Name:       "Kubernetes",
	Schemes:    []string{Scheme},
	Open:       OpenURL,
	ExampleURL: "kubernetes://namespace",
	Reach:      store.ReachAPI,
	Params:     []string{"kubeconfig", "context"},
	Doc: store.Doc{
		README: "store/kubernetes/README.md",
		URLs:   []string{"kubernetes://namespace"},
		Token:  "`leaseTransitions`, above a high-water object that survives the Lease's deletion",
		Expiry: "each contender's own clock (client-go's rule)",
		Wake:   "a watch on the Lease",
		Notes:  "interoperates with client-go's `LeaderElector`; minimal RBAC role in `deploy/kubernetes`",
	},
}
