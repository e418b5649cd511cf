package sqlfence_test

import (
	"os/exec"
	"strings"
	"testing"
)

// pgxDeps lists the pgx packages that pkg links (go list -deps).
func pgxDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	var pgx []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/jackc/") {
			pgx = append(pgx, p)
		}
	}
	return pgx
}

// A SQLite or MySQL user of sqlfence does not link pgx: only pgxfence does.
// The negative control is pgxfence itself, which must be seen linking it.
func TestSqlfenceDoesNotLinkPgx(t *testing.T) {
	if got := pgxDeps(t, "github.com/leasehold/leasehold/fence/sqlfence"); len(got) > 0 {
		t.Errorf("fence/sqlfence depends on %v; pgx belongs in fence/sqlfence/pgxfence", got)
	}
	if got := pgxDeps(t, "github.com/leasehold/leasehold/fence/sqlfence/pgxfence"); len(got) == 0 {
		t.Errorf("negative control: no pgx package found among pgxfence's dependencies; the check cannot see pgx")
	}
}
