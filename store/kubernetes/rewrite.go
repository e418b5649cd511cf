package kubernetes

import (
	"encoding/json"
	"fmt"
	"os"
)

// KubeconfigServer returns the API server's URL and the context's name that
// a kubernetes:// URL's kubeconfig and context parameters select (path "" is
// $KUBECONFIG, else ~/.kube/config; contextName "" is the current context).
// It does not look at a pod's service account.
func KubeconfigServer(path, contextName string) (server, context string, err error) {
	_, name, cl, err := kubeconfigContext(path, contextName)
	if err != nil {
		return "", "", fmt.Errorf("leasehold/kubernetes: kubeconfig: %w", err)
	}
	return cl.Server, name, nil
}

// WriteKubeconfig writes to dst (mode 0600: it holds the original's
// credentials) a kubeconfig of one context: the one path and contextName
// select, as KubeconfigServer does, with its cluster's server replaced by
// server. Relative paths in it are made absolute, so the copy works from
// any directory. The chaos harness (leasehold verify) uses it to point a
// node at its fault proxy.
func WriteKubeconfig(path, contextName, server, dst string) error {
	kc, name, cl, err := kubeconfigContext(path, contextName)
	if err != nil {
		return fmt.Errorf("leasehold/kubernetes: kubeconfig: %w", err)
	}
	ctx := kc.contexts[name]
	cl.Server = server
	var f kubeconfigFile
	f.CurrentContext = name
	f.Clusters = append(f.Clusters, struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	}{ctx.Cluster, cl})
	if ctx.User != "" {
		f.Users = append(f.Users, struct {
			Name string `json:"name"`
			User kcUser `json:"user"`
		}{ctx.User, kc.users[ctx.User]})
	}
	f.Contexts = append(f.Contexts, struct {
		Name    string    `json:"name"`
		Context kcContext `json:"context"`
	}{name, ctx})
	b, err := json.MarshalIndent(f, "", "  ") // JSON is YAML
	if err != nil {
		return fmt.Errorf("leasehold/kubernetes: write kubeconfig: %w", err)
	}
	if err := os.WriteFile(dst, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("leasehold/kubernetes: write kubeconfig: %w", err)
	}
	return os.Chmod(dst, 0o600) // WriteFile keeps an existing file's mode
}

// kubeconfigContext loads the kubeconfig and finds the context and its
// cluster, with the errors fromKubeconfig gives.
func kubeconfigContext(path, contextName string) (*kubeconfig, string, kcCluster, error) {
	kc, err := loadKubeconfig(path)
	if err != nil {
		return nil, "", kcCluster{}, err
	}
	name := contextName
	if name == "" {
		name = kc.currentContext
	}
	if name == "" {
		return nil, "", kcCluster{}, fmt.Errorf("the kubeconfig sets no current-context; name one with ?context=NAME")
	}
	ctx, ok := kc.contexts[name]
	if !ok {
		return nil, "", kcCluster{}, fmt.Errorf("context %q is not in the kubeconfig", name)
	}
	cl, ok := kc.clusters[ctx.Cluster]
	if !ok {
		return nil, "", kcCluster{}, fmt.Errorf("context %q names cluster %q, which is not in the kubeconfig", name, ctx.Cluster)
	}
	if cl.Server == "" {
		return nil, "", kcCluster{}, fmt.Errorf("cluster %q has no server", ctx.Cluster)
	}
	return kc, name, cl, nil
}
