package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// blindStore hides every lease from the harness, so that it never sees a
// first leader: the failure of an etcd soak's group that lost the whole
// run's summary.
type blindStore struct{ store.Store }

func (blindStore) Get(ctx context.Context, name string) (store.Record, error) {
	return store.Record{}, store.ErrNotFound
}

// A group that fails does not cost the run its summary: of three groups,
// g02 cannot open its store and g03 never sees a first leader. The run
// fails naming both, and still writes the history, result and report of
// the whole run, with g01's figures and g03's (it ran until its error), and
// both errors in the summary and in result.json.
func TestFleetReportsAFailedGroupAndKeepsTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run of about 25 s")
	}
	// Beside the other negative controls, once the store runs (sequential)
	// are done: a short run of a few processes each.
	t.Parallel()
	c := baseConfig(t, "sqlite://"+filepath.Join(t.TempDir(), "leases.db"), 3*time.Second)
	c.Groups = 3
	c.Faults = []string{faultKill}
	c.LeaderBias = 1
	c.Timings = leasehold.Timings{LeaseDuration: time.Second} // waitLeader gives up after 10 leases + 10 s
	c.Slack = 200 * time.Millisecond
	open := c.Open
	c.Open = func(ctx context.Context, u *url.URL) (store.Store, error) {
		switch {
		case strings.Contains(u.Path, "-g02"):
			return nil, errors.New("this group's store is down")
		case strings.Contains(u.Path, "-g03"):
			st, err := open(ctx, u)
			return blindStore{st}, err
		}
		return open(ctx, u)
	}
	out, err := Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "group g02") || !strings.Contains(err.Error(), "group g03: leasehold/chaos: no node became leader") {
		t.Errorf("err = %v, want the run to fail naming g02 and g03", err)
	}
	if out == nil {
		t.Fatalf("a failed group lost the run's outcome: %v", err)
	}
	t.Log(out.Summary)
	for _, want := range []string{"FAIL", "3 groups", "2 groups ended in an error", "g02: ", "this group's store is down", "g03: leasehold/chaos: no node became leader"} {
		if !strings.Contains(out.Summary, want) {
			t.Errorf("summary lacks %q: %s", want, out.Summary)
		}
	}
	if out.Result.Stats.WritesAccepted == 0 || out.Result.Stats.Terms == 0 || len(out.Groups) != 2 {
		t.Errorf("g01's and g03's figures were not added up: %d groups, %+v", len(out.Groups), out.Result.Stats)
	}
	raw, rerr := os.ReadFile(filepath.Join(c.Dir, "result.json"))
	if rerr != nil {
		t.Fatalf("no result of the whole run: %v", rerr)
	}
	var res struct {
		Summary     string `json:"summary"`
		GroupErrors []struct {
			Group, Error string
		} `json:"group_errors"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Summary != out.Summary || len(res.GroupErrors) != 2 || res.GroupErrors[0].Group != "g02" || res.GroupErrors[1].Group != "g03" ||
		!strings.Contains(res.GroupErrors[1].Error, "no node became leader") {
		t.Errorf("result.json: summary %q, group errors %+v", res.Summary, res.GroupErrors)
	}
	for _, f := range []string{"history.json", "report.html", "g01/report.html", "g03/result.json"} {
		if _, err := os.Stat(filepath.Join(c.Dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(c.Dir, "report.html")); !strings.Contains(string(b), "this group&#39;s store is down") {
		t.Error("the run's report does not show g02's error")
	}
}

// finishFleet adds up the groups that have an outcome, carries the error of
// one that failed after it recorded a history, and adds the error of one
// that recorded nothing; the error it returns names every failed group.
func TestFinishFleetKeepsTheOthersResults(t *testing.T) {
	good := &Outcome{History: cleanHistory()}
	good.Result = checkHistory(good.History, checkOptions{})
	late := &Outcome{History: cleanHistory()}
	late.Result = checkHistory(late.History, checkOptions{})
	late.Result.GroupErrors = []GroupError{{Group: "g03", Error: "a fault could not be made"}}
	dir := t.TempDir()
	out, err := finishFleet(dir, 7, []*Outcome{good, nil, late}, []error{nil, errors.New("no store"), errors.New("a fault could not be made")})
	if err == nil || !strings.Contains(err.Error(), "group g02: no store") || !strings.Contains(err.Error(), "group g03: a fault could not be made") {
		t.Errorf("err = %v", err)
	}
	if out == nil {
		t.Fatal("no outcome")
	}
	if out.Result.OK() || len(out.Result.GroupErrors) != 2 || out.Result.GroupErrors[0].Group != "g02" || out.Result.GroupErrors[1].Group != "g03" {
		t.Errorf("group errors = %+v", out.Result.GroupErrors)
	}
	if w := good.Result.Stats.WritesAccepted + late.Result.Stats.WritesAccepted; out.Result.Stats.WritesAccepted != w || faultTotal(out.Result) != 2 {
		t.Errorf("merged: %d writes (want %d), %d faults", out.Result.Stats.WritesAccepted, w, faultTotal(out.Result))
	}
	if !strings.Contains(out.Summary, "leasehold verify: FAIL") || !strings.Contains(out.Summary, "3 groups") || !strings.Contains(out.Summary, "g02: no store") {
		t.Errorf("summary = %s", out.Summary)
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err != nil {
		t.Error(err)
	}
	// Every group failed before it recorded anything: nothing to add up.
	if out, err := finishFleet(t.TempDir(), 7, []*Outcome{nil, nil}, []error{errors.New("a"), errors.New("b")}); out != nil || err == nil || !strings.Contains(err.Error(), "group g02: b") {
		t.Errorf("all failed: out %v, err %v", out, err)
	}
}
