package storekit_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestParamsRead(t *testing.T) {
	u := mustURL(t, "x://h/?table=leases&busy_timeout=10s&create=false&n=7&mode=b&other=1")
	p := kit.Params(u)
	if got := p.String("table", "def"); got != "leases" {
		t.Errorf("String = %q", got)
	}
	if got := p.String("schema", "def"); got != "def" {
		t.Errorf("String of an absent parameter = %q, want the default", got)
	}
	if got := p.Duration("busy_timeout", time.Second); got != 10*time.Second {
		t.Errorf("Duration = %v", got)
	}
	if got := p.Bool("create", true); got {
		t.Errorf("Bool = true, want false")
	}
	if got := p.Int("n", 0, 1, 10); got != 7 {
		t.Errorf("Int = %d", got)
	}
	if got := p.OneOf("mode", "a", "a", "b"); got != "b" {
		t.Errorf("OneOf = %q", got)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if rest := p.Rest(); len(rest) != 1 || rest.Get("other") != "1" {
		t.Errorf("Rest = %v, want only other=1", rest)
	}
	err := p.Done()
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Done with an unknown parameter = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`unknown URL parameter "other"`, "known: table, schema, busy_timeout, create, n, mode", "leasehold/teststore: URL x://h/?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Done = %q, want it to say %q", err, want)
		}
	}
	// Negative control: nothing unknown, no error.
	p = kit.Params(mustURL(t, "x://h/?table=t"))
	p.String("table", "")
	if err := p.Done(); err != nil {
		t.Errorf("Done with every parameter taken = %v", err)
	}
}

func TestParamsBadValues(t *testing.T) {
	const secret = "hunter2-Secret"
	cases := []struct {
		query string
		want  string
	}{
		{"busy_timeout=soon", `busy_timeout="soon" is not a positive duration`},
		{"busy_timeout=-1s", `busy_timeout="-1s" is not a positive duration`},
		{"create=maybe", `create="maybe" is not true or false`},
		{"n=11", `n="11" is not a decimal integer from 1 to 10`},
		{"mode=c", `mode="c": want one of a, b`},
		{"table=", "parameter table is empty"},
		{"table=a&table=b", "parameter table is given 2 times"},
		{"cacert=/a&ca_file=/b", "parameters ca_file and cacert are the same parameter"},
		{"cert_file=/c", "cert_file and key_file go together"},
		{"bogus=1&zz=2", `unknown URL parameters "bogus", "zz"`},
		{"table=%zz", "the URL query does not parse"},
		{"token_password=" + secret, "is not true or false"},
	}
	for _, c := range cases {
		u := mustURL(t, "x://u:"+secret+"@h/?"+c.query)
		p := kit.Params(u)
		p.String("table", "")
		p.Duration("busy_timeout", 0)
		p.Bool("create", true)
		p.Int("n", 0, 1, 10)
		p.OneOf("mode", "a", "a", "b")
		p.Bool("token_password", false)
		p.TLSFiles()
		err := p.Done()
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.query, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %q, want it to say %q", c.query, err, c.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: err = %q shows the secret", c.query, err)
		}
	}
	if err := kit.Params(nil).Done(); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Params(nil).Done() = %v, want ErrInvalid", err)
	}
}

func TestParamsAliases(t *testing.T) {
	for _, raw := range []string{"x://h/?ca_file=/ca.pem&cert_file=/c.pem&key_file=/k.pem", "x://h/?cacert=/ca.pem&cert=/c.pem&key=/k.pem"} {
		p := kit.Params(mustURL(t, raw))
		f := p.TLSFiles()
		if err := p.Done(); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if f.CAFile != "/ca.pem" || f.CertFile != "/c.pem" || f.KeyFile != "/k.pem" || f.ServerName != "" {
			t.Errorf("%s: TLSFiles = %+v", raw, f)
		}
		if !f.Given() || strings.Join(f.Names(), ",") != "ca_file,cert_file,key_file" {
			t.Errorf("%s: Given/Names = %v, %v", raw, f.Given(), f.Names())
		}
	}
	p := kit.Params(mustURL(t, "x://h/?a=1"))
	if f := p.TLSFiles(); f.Given() {
		t.Errorf("TLSFiles without TLS parameters = %+v", f)
	}
	if !p.Has("a") || p.Has("b") {
		t.Errorf("Has is wrong")
	}
}
