package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/leasehold/leasehold/store"
)

// Scheme is the URL scheme of this store.
const Scheme = "kubernetes"

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
	if ns != "" && !isDNSLabel(ns) {
		return nil, kit.Invalid("", "namespace %q is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)", ns)
	}
	q := u.Query()
	for k := range q {
		if k != "kubeconfig" && k != "context" {
			return nil, kit.Invalid("", "unknown URL parameter %q; known: kubeconfig, context", k)
		}
	}
	conn, err := connect(q.Get("kubeconfig"), q.Get("context"))
	if err != nil {
		return nil, fmt.Errorf("leasehold/kubernetes: %w", err)
	}
	if ns == "" {
		ns = conn.namespace
	}
	if ns == "" {
		ns = "default"
	}
	st, err := New(Config{Server: conn.server, HTTPClient: conn.client, Namespace: ns})
	if err != nil {
		return nil, err
	}
	st.closeIdle = conn.client.CloseIdleConnections
	return st, nil
}

// connect finds the server and the credentials: in a pod with neither
// parameter, the pod's service account; else the kubeconfig.
func connect(kubeconfig, contextName string) (connection, error) {
	if kubeconfig == "" && contextName == "" {
		conn, err := inCluster()
		switch {
		case err == nil:
			return conn, nil
		case !errors.Is(err, errNotInCluster):
			return connection{}, fmt.Errorf("in-cluster config: %w", err)
		}
	}
	conn, err := fromKubeconfig(kubeconfig, contextName)
	if err != nil {
		return connection{}, fmt.Errorf("kubeconfig: %w", err)
	}
	return conn, nil
}
