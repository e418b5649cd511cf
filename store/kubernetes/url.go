package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/store"
)

// Scheme is the URL scheme of this store.
const Scheme = "kubernetes"

// inClusterNamespaceFile is where a pod's service account namespace is mounted.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OpenURL opens a store named by a URL of the form
//
//	kubernetes://NAMESPACE[?kubeconfig=PATH][&context=NAME]
//
// NAMESPACE holds the Lease objects. The credentials are found as kubectl and
// client-go programs find them:
//
//   - with neither parameter, in a pod (KUBERNETES_SERVICE_HOST set), the
//     pod's service account (in-cluster config);
//   - otherwise the kubeconfig file: PATH if given, else $KUBECONFIG, else
//     ~/.kube/config; its current context, or the context NAME.
//
// An empty NAMESPACE (kubernetes:// or kubernetes:///) means the pod's own
// namespace in a pod ($POD_NAMESPACE, else the service account's), or the
// context's namespace from a kubeconfig ("default" if it names none).
// The URL carries no credentials: one with a user or password is refused.
// OpenURL makes no request; the first call of the store reaches the server.
func OpenURL(ctx context.Context, u *url.URL) (store.Store, error) {
	if u.Scheme != Scheme {
		return nil, kit.Invalid("", "URL scheme %q, want %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return nil, kit.Invalid("", "the URL must not hold credentials; they come from the pod's service account or a kubeconfig")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, kit.Invalid("", "unexpected path %q; the form is kubernetes://NAMESPACE?kubeconfig=PATH&context=NAME", u.Path)
	}
	if u.Port() != "" {
		return nil, kit.Invalid("", "the URL's host is the namespace, not a server address; the server comes from the kubeconfig or the pod")
	}
	ns := u.Host
	if ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, kit.Invalid("", "namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	q := u.Query()
	for k := range q {
		if k != "kubeconfig" && k != "context" {
			return nil, kit.Invalid("", "unknown URL parameter %q; known: kubeconfig, context", k)
		}
	}
	cfg, defNS, err := restConfig(q.Get("kubeconfig"), q.Get("context"))
	if err != nil {
		return nil, fmt.Errorf("leasehold/kubernetes: %w", err)
	}
	if ns == "" {
		ns = defNS
	}
	if ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "leasehold"
	if cfg.QPS == 0 {
		// client-go's default (5 per second) is tight for a process that
		// holds many leases; stay modest all the same.
		cfg.QPS, cfg.Burst = 20, 40
	}
	client, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leasehold/kubernetes: client: %w", err)
	}
	return New(Config{Client: client, Namespace: ns})
}

// restConfig finds the client config and the default namespace.
func restConfig(kubeconfig, contextName string) (*rest.Config, string, error) {
	if kubeconfig == "" && contextName == "" {
		cfg, err := rest.InClusterConfig()
		switch {
		case err == nil:
			ns := os.Getenv("POD_NAMESPACE")
			if ns == "" {
				if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
					ns = strings.TrimSpace(string(b))
				}
			}
			return cfg, ns, nil
		case !errors.Is(err, rest.ErrNotInCluster):
			return nil, "", fmt.Errorf("in-cluster config: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: contextName})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	return cfg, ns, nil
}
