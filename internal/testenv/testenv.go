// Package testenv finds the servers that store tests talk to. A server that
// is missing is a loud skip on a laptop and a failure when the CI variable is
// set, so that CI can never pass by skipping.
package testenv

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI (the CI variable is set and not "false" or "0").
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// Missing stops the test because a server or tool it needs is not there:
// t.Fatalf in CI, a loud t.Skipf elsewhere. how says how to get it.
func Missing(t testing.TB, what, how string) {
	t.Helper()
	if InCI() {
		t.Fatalf("REQUIRED IN CI: %s is not available (%s)", what, how)
	}
	t.Skipf("SKIPPED: %s is not available; %s", what, how)
}

// RequireTCP checks that something listens on addr (host:port), or calls
// Missing. It returns addr.
func RequireTCP(t testing.TB, what, addr, how string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		Missing(t, what+" at "+addr, how)
		return addr
	}
	c.Close()
	return addr
}

// Env returns the environment variable name, or def when it is unset.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// MySQLDSN returns the go-sql-driver DSN of the MySQL/MariaDB test server,
// without a database ("root@tcp(127.0.0.1:3306)/"), or calls Missing. The
// LEASEHOLD_TEST_MYSQL variable overrides it (the same variable
// fence/sqlfence's tests read). Tests create a database of their own on it.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := Env("LEASEHOLD_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/")
	addr := "127.0.0.1:3306"
	if i, j := strings.Index(dsn, "tcp("), strings.Index(dsn, ")/"); i >= 0 && j > i+4 {
		addr = dsn[i+4 : j]
	}
	RequireTCP(t, "MySQL/MariaDB", addr, "start MariaDB or MySQL on 127.0.0.1:3306 (user root, no password) or set LEASEHOLD_TEST_MYSQL to a go-sql-driver DSN such as user:pass@tcp(host:3306)/")
	return dsn
}
