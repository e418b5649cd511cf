package store_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// One redaction for every output of a store URL: the command's and the chaos
// harness's (`leasehold verify`), which once hid only ?password=.
func TestRedactURL(t *testing.T) {
	raw := "redis://u:pw1@127.0.0.1:6379/0?password=pw2&auth_token=pw3&sslpassword=pw4&ca_file=/etc/ca.pem&sslkey=/k.pem#frag"
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	got := store.RedactURL(u)
	for _, secret := range []string{"pw1", "pw2", "pw3", "pw4", "frag"} {
		if strings.Contains(got, secret) {
			t.Errorf("RedactURL = %q: still shows %q", got, secret)
		}
	}
	for _, kept := range []string{"u:xxxxx@", "ca_file=/etc/ca.pem", "sslkey=/k.pem", "auth_token=xxxxx"} {
		if !strings.Contains(got, kept) {
			t.Errorf("RedactURL = %q: want it to keep %q", got, kept)
		}
	}
}

// An opaque URL (no "//") keeps its user info in the opaque part, where
// url.URL's own redaction does not look.
func TestRedactURLOpaque(t *testing.T) {
	for raw, want := range map[string]string{
		"redis:u:hunter2@127.0.0.1:6379": "redis:xxxxx@127.0.0.1:6379",
		"sqlite:relative/leases.db":      "sqlite:relative/leases.db",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := store.RedactURL(u); got != want {
			t.Errorf("RedactURL(%s) = %q, want %q", strings.ReplaceAll(raw, "hunter2", "…"), got, want)
		}
	}
}
