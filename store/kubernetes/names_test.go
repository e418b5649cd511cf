package kubernetes

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leasehold/leasehold/store"
)

func TestObjectName(t *testing.T) {
	verbatim := []string{"job", "my-controller", "a.b.c", "x1", strings.Repeat("n", store.MaxNameLen)}
	for _, name := range verbatim {
		obj, v, err := ObjectName(name)
		if err != nil || !v || obj != name {
			t.Errorf("ObjectName(%q) = %q, %v, %v; want the name itself", name, obj, v, err)
		}
	}
	mapped := map[string]string{
		"jobs/Nightly_Report":                 "jobs-nightly-report-",
		"shard/1":                             "shard-1-",
		"Job":                                 "job-",
		"a..b":                                "a.b-",
		"x.-y":                                "x.y-",
		"-x":                                  "x-",
		"_":                                   "lease-",
		"a/.b":                                "a.b-",
		"0_":                                  "0-",
		"UP.":                                 "up-",
		strings.Repeat("N", store.MaxNameLen): strings.Repeat("n", store.MaxNameLen) + "-",
	}
	seen := map[string]string{}
	for name, prefix := range mapped {
		obj, v, err := ObjectName(name)
		if err != nil || v {
			t.Errorf("ObjectName(%q) = %q, %v, %v; want a mapped name", name, obj, v, err)
			continue
		}
		if !strings.HasPrefix(obj, prefix) || len(obj) != len(prefix)+hashLen {
			t.Errorf("ObjectName(%q) = %q, want %q and %d hex digits", name, obj, prefix, hashLen)
		}
		if errs := validation.IsDNS1123Subdomain(obj); len(errs) > 0 {
			t.Errorf("ObjectName(%q) = %q, not an object name: %v", name, obj, errs)
		}
		again, _, _ := ObjectName(name)
		if again != obj {
			t.Errorf("ObjectName(%q) not deterministic: %q then %q", name, obj, again)
		}
		if other, dup := seen[obj]; dup {
			t.Errorf("ObjectName(%q) = ObjectName(%q) = %q", name, other, obj)
		}
		seen[obj] = name
	}
	// Names that differ only where the mapping folds them stay apart.
	a, _, _ := ObjectName("Job")
	b, _, _ := ObjectName("JOB")
	c, _, _ := ObjectName("jo_b")
	d, _, _ := ObjectName("jo/b")
	if a == b || c == d {
		t.Errorf("folded names collide: %q %q %q %q", a, b, c, d)
	}
	for _, bad := range []string{"", "a b", "/x", ".x", strings.Repeat("n", store.MaxNameLen+1)} {
		if _, _, err := ObjectName(bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ObjectName(%q): err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestTTLSeconds(t *testing.T) {
	cases := map[string]int32{"1s": 1, "1.001s": 2, "1500ms": 2, "2s": 2, "15s": 15, "1h": 3600}
	for in, want := range cases {
		d, _ := time.ParseDuration(in)
		got, err := ttlSeconds(d)
		if err != nil || got != want {
			t.Errorf("ttlSeconds(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
}
