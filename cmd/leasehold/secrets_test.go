package main_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"
)

// TestSecretsNeverPrinted plants a secret in every place a store URL can
// carry one (the password of the user info; PostgreSQL's ?password= and
// ?sslpassword=; Redis's user info and ?password=; a parameter named like a
// token) and runs every command that takes a store, on success and on error
// paths, with the URL given by --store and by $LEASEHOLD_STORE. No output,
// log line, HTTP body or environment of run's command may contain any of them.
func TestSecretsNeverPrinted(t *testing.T) {
	pg := postgresURL(t) // postgres://postgres@ADDR/test?schema=S&create_if_missing=true
	redisAddr := testenv.RequireTCP(t, "Redis", testenv.Env("LEASEHOLD_REDIS_ADDR", "127.0.0.1:6379"), "start Redis on 127.0.0.1:6379")
	n := rand.Uint64() % 1_000_000_000
	secret := func(where string) string { return fmt.Sprintf("Plant%s%dZq", where, n) }
	secrets := []string{secret("UserInfo"), secret("PgPassword"), secret("PgSslPassword"), secret("Token"), secret("RedisUser"), secret("RedisParam")}

	// PostgreSQL trusts local connections, so the planted passwords are
	// accepted and ignored: the success paths run with them.
	withSecrets := strings.Replace(pg, "postgres@", "postgres:"+secrets[0]+"@", 1) +
		"&password=" + secrets[1] + "&sslpassword=" + secrets[2] + "&sslmode=disable"
	badDB := strings.Replace(withSecrets, "/test?", "/no_such_db_lh?", 1)
	redisBad := fmt.Sprintf("redis://:%s@%s/0?prefix=lh-secret-%d:", secrets[4], redisAddr, n)
	redisParam := fmt.Sprintf("redis://%s/0?password=%s", redisAddr, secrets[5])
	tokenParam := fmt.Sprintf("etcd://127.0.0.1:1/x?auth_token=%s", secrets[3])
	lease := fmt.Sprintf("secret-%d", n)

	var outputs []string
	// run runs leasehold CMD [store flags] FLAGS... ARGS; the header it
	// records names the command, not the URL (which holds the secrets).
	run := func(env, storeArgs []string, cmd string, rest ...string) {
		t.Helper()
		args := append(append([]string{cmd}, storeArgs...), rest...)
		code, out, errOut := leasehold(t, env, args...)
		outputs = append(outputs, fmt.Sprintf("$ leasehold %s ... (exit %d)\n%s%s", cmd, code, out, errOut))
	}
	for _, u := range []string{withSecrets, badDB, redisBad, redisParam, tokenParam} {
		for _, how := range []struct {
			env  []string
			args []string
		}{{nil, []string{"--store", u}}, {[]string{"LEASEHOLD_STORE=" + u}, nil}} {
			run(how.env, how.args, "migrate")
			run(how.env, how.args, "doctor", "--samples", "2")
			run(how.env, how.args, "status")
			run(how.env, how.args, "status", "--json", lease)
			run(how.env, how.args, "history", lease)
			run(how.env, how.args, "release", "--force", lease)
			run(how.env, how.args, "run", "--lease", lease, "--log-level", "debug", "--connect-timeout", "3s", "--", "true")
		}
	}

	// run on the good URL, given by $LEASEHOLD_STORE: the log (text and
	// JSON), /healthz, /leader, /metrics, the status page's API, and the command's environment.
	for _, format := range []string{"text", "json"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		p := startProc(t, []string{"LEASEHOLD_STORE=" + withSecrets},
			"run", "--lease", lease, "--http", addr, "--log-level", "debug", "--log-format", format,
			"--", "sh", "-c", "env; echo child-up; read x")
		p.waitExact(t, "child-up", time.Minute)
		for _, path := range []string{"/healthz", "/leader", "/metrics", "/api/leases", "/api/history?lease=" + lease} {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			outputs = append(outputs, "GET "+path+"\n"+string(body))
		}
		io.WriteString(p.stdin, "done\n")
		if code := p.exitCode(t, time.Minute); code != 0 {
			t.Fatalf("run exited %d:\n%s", code, p.output())
		}
		out := p.output()
		if !strings.Contains(out, "LEASEHOLD_STORE=postgres://postgres:xxxxx@") {
			t.Errorf("the command did not get the redacted LEASEHOLD_STORE:\n%s", out)
		}
		outputs = append(outputs, out)
	}

	all := strings.Join(outputs, "\n")
	// The control: the outputs do name the stores (redacted), so the search
	// looks where the secrets would be.
	for _, want := range []string{"postgres://postgres:xxxxx@", "password=xxxxx", "sslpassword=xxxxx", "auth_token=xxxxx", "no_such_db_lh", "LEASEHOLD_TOKEN="} {
		if !strings.Contains(all, want) {
			t.Errorf("no output contains %q: the test does not see what it means to check", want)
		}
	}
	for _, s := range secrets {
		if strings.Contains(all, s) {
			for _, o := range outputs {
				if strings.Contains(o, s) {
					t.Errorf("secret %s printed:\n%s", s, o)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("all outputs:\n%s", all)
	}
}
