package storekit_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store/storekit"
)

func TestSecretsAndScrub(t *testing.T) {
	u := mustURL(t, "redis://app:p%40ss%2Fw@h:6379/0?sslpassword=s+1&ca_file=/ca.pem&prefix=app")
	secrets := storekit.Secrets(u)
	for _, want := range []string{"p@ss/w", "p%40ss%2Fw", "s+1", "s 1"} {
		found := false
		for _, s := range secrets {
			found = found || s == want
		}
		if !found {
			t.Errorf("Secrets = %q: want %q among them", secrets, want)
		}
	}
	for _, s := range secrets {
		if s == "/ca.pem" || s == "app" {
			t.Errorf("Secrets lists %q, which is no secret", s)
		}
	}
	msg := "dial h:6379: auth p@ss/w refused (url redis://app:p%40ss%2Fw@h, sslpassword=s+1), prefix app"
	got := storekit.Scrub(msg, secrets)
	for _, s := range []string{"p@ss", "p%40ss", "s+1"} {
		if strings.Contains(got, s) {
			t.Errorf("Scrub left %q in %q", s, got)
		}
	}
	if !strings.Contains(got, "prefix app") || !strings.Contains(got, "auth xxxxx refused") {
		t.Errorf("Scrub = %q: want the rest kept and the secret replaced by xxxxx", got)
	}
	if storekit.Secrets(mustURL(t, "postgres://u@h/db?sslmode=disable")) != nil {
		t.Errorf("Secrets of a URL without secrets is not empty")
	}
	// Longest first: a secret containing another is replaced whole.
	if got := storekit.Scrub("abcd", []string{"ab", "abcd"}); got != "xxxxx" {
		t.Errorf("Scrub(abcd, [ab abcd]) = %q, want xxxxx", got)
	}
}
