package fence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// The test names say which check each test stands behind: removing that
// check (the token comparison, the per-resource hold, the Save before the
// write) makes the test fail.

func TestGuardRefusesStaleToken_FailsWithoutCheck(t *testing.T) {
	ctx := context.Background()
	g := NewGuard(nil)
	var wrote []int64
	write := func(tok int64) func(context.Context) error {
		return func(context.Context) error { wrote = append(wrote, tok); return nil }
	}
	if err := g.Do(ctx, "sweeper", "a", 2, write(2)); err != nil {
		t.Fatalf("token 2: %v", err)
	}
	err := g.Do(ctx, "sweeper", "a", 1, write(1))
	if !errors.Is(err, ErrStale) {
		t.Fatalf("token 1 after 2: err = %v, want ErrStale", err)
	}
	var se *StaleError
	if !errors.As(err, &se) || se.Resource != "sweeper" || se.Token != 1 || se.Highest != 2 {
		t.Fatalf("StaleError = %+v, want {sweeper 1 2}", se)
	}
	if len(wrote) != 1 || wrote[0] != 2 {
		t.Fatalf("writes = %v, want only [2]: the stale write ran", wrote)
	}
	// An equal token is the same term writing again; a higher one is a newer term.
	if err := g.Do(ctx, "sweeper", "a", 2, write(2)); err != nil {
		t.Fatalf("token 2 again: %v", err)
	}
	if err := g.Check(ctx, "sweeper", "a", 3); err != nil {
		t.Fatalf("token 3: %v", err)
	}
	if err := g.Check(ctx, "sweeper", "a", 2); !errors.Is(err, ErrStale) {
		t.Fatalf("token 2 after 3: err = %v, want ErrStale", err)
	}
	// Resources are fenced separately.
	if err := g.Check(ctx, "other", "a", 1); err != nil {
		t.Fatalf("other resource, token 1: %v", err)
	}
	if h, _ := g.Highest(ctx, "sweeper"); h != (Admitted{Token: 3, Holder: "a"}) {
		t.Fatalf("Highest = %+v, want {3 a}", h)
	}
}

func TestGuardBadInput(t *testing.T) {
	ctx := context.Background()
	g := NewGuard(nil)
	for _, c := range []struct {
		res string
		tok int64
		hol string
	}{{"", 1, "a"}, {"r", 0, "a"}, {"r", -5, "a"}, {"a\nb", 1, "a"}, {string(make([]byte, MaxResourceLen+1)), 1, "a"}, {"\xff", 1, "a"},
		{"r", 1, ""}, {"r", 1, "a b"}, {"r", 1, "h\u00e9"}, {"r", 1, "a\x00"}, {"r", 1, strings.Repeat("h", MaxHolderLen+1)}} {
		called := false
		err := g.Do(ctx, c.res, c.hol, c.tok, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, ErrInvalid) || called {
			t.Errorf("Do(%q, %q, %d): err = %v, called = %v; want ErrInvalid, not called", c.res, c.hol, c.tok, err, called)
		}
	}
	if err := g.Check(ctx, "r", "", 1); err == nil || !strings.Contains(err.Error(), "holder identity is empty") {
		t.Errorf("empty holder: err = %v, want one naming the empty holder", err)
	}
}

// An older writer admitted first holds the resource until its write is done,
// so a newer writer admitted after it writes after it. Without the hold, the
// newer write would land first and the paused older one would overwrite it.
func TestGuardDoHoldsResourceDuringWrite_FailsWithoutHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		g := NewGuard(nil)
		var mu sync.Mutex
		var value int64
		var order []int64
		set := func(tok int64) {
			mu.Lock()
			defer mu.Unlock()
			value = tok
			order = append(order, tok)
		}
		started, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			err := g.Do(ctx, "r", "a", 1, func(context.Context) error {
				close(started)
				<-release // node-a is paused in the middle of its write
				set(1)
				return nil
			})
			if err != nil {
				t.Errorf("token 1: %v", err)
			}
		})
		<-started
		wg.Go(func() {
			if err := g.Do(ctx, "r", "a", 2, func(context.Context) error { set(2); return nil }); err != nil {
				t.Errorf("token 2: %v", err)
			}
		})
		synctest.Wait() // token 2 is now blocked, or it has written
		mu.Lock()
		early := len(order)
		mu.Unlock()
		if early != 0 {
			t.Fatalf("token 2 wrote while token 1's write was in progress (order %v)", order)
		}
		close(release)
		wg.Wait()
		if value != 2 || len(order) != 2 || order[0] != 1 || order[1] != 2 {
			t.Fatalf("value %d, order %v; want 2, [1 2]", value, order)
		}
	})
}

// The wait for a busy resource ends with ctx.
func TestGuardDoWaitHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGuard(nil)
		started, release := make(chan struct{}), make(chan struct{})
		go g.Do(context.Background(), "r", "a", 1, func(context.Context) error { close(started); <-release; return nil })
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- g.Do(ctx, "r", "a", 1, func(context.Context) error { return nil }) }()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		close(release)
	})
}

// Many goroutines race random tokens on one resource; the writes that ran
// must be in non-decreasing token order, and each refusal must name a highest
// token above the refused one.
func TestGuardConcurrentWritersNeverGoBackwards_FailsWithoutCheck(t *testing.T) {
	ctx := context.Background()
	g := NewGuard(nil)
	var mu sync.Mutex
	var applied []int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range 200 {
				tok := int64(rng.IntN(50) + 1)
				// One holder per token: each token is one term here.
				err := g.Do(ctx, "r", fmt.Sprintf("h%d", tok), tok, func(context.Context) error {
					mu.Lock()
					applied = append(applied, tok)
					mu.Unlock()
					return nil
				})
				var se *StaleError
				switch {
				case err == nil:
				case errors.As(err, &se):
					if se.Highest <= tok {
						t.Errorf("refused token %d with highest %d", tok, se.Highest)
					}
				default:
					t.Errorf("token %d: %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("write %d had token %d after %d", i, applied[i], applied[i-1])
		}
	}
	if len(applied) == 0 {
		t.Fatal("no write was admitted")
	}
}

func TestGuardRemembersAcrossRestart_FailsWithoutPersister(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.json")
	p, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(p)
	if err := g.Check(ctx, "sweeper", "a", 5); err != nil {
		t.Fatal(err)
	}
	// A restart: a new persister and guard on the same file.
	p2, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	g2 := NewGuard(p2)
	var se *StaleError
	if err := g2.Check(ctx, "sweeper", "a", 4); !errors.As(err, &se) || se.Highest != 5 {
		t.Fatalf("token 4 after restart: err = %v, want StaleError with highest 5", err)
	}
	if err := g2.Check(ctx, "sweeper", "a", 5); err != nil {
		t.Fatalf("token 5 after restart: %v", err)
	}
}

// The token is durable before the write runs: inside fn, a fresh reader of
// the file already sees it.
func TestGuardSavesBeforeWrite_FailsIfSavedAfter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.json")
	p, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(p)
	err = g.Do(ctx, "r", "a", 7, func(context.Context) error {
		fresh, err := NewFilePersister(path)
		if err != nil {
			return err
		}
		if got, _ := fresh.Load(ctx, "r"); got != (Admitted{Token: 7, Holder: "a"}) {
			t.Errorf("during the write the file holds %+v, want {7 a}", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// failingPersister fails Save while fail is set; it stands in for a full disk.
type failingPersister struct {
	mu    sync.Mutex
	fail  bool
	saved map[string]Admitted
}

func (f *failingPersister) Load(_ context.Context, r string) (Admitted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.saved[r], nil
}

func (f *failingPersister) Save(_ context.Context, r string, tok Admitted) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("disk full")
	}
	f.saved[r] = tok
	return nil
}

// A token whose Save failed is not admitted (the write does not run), is not
// admitted later without a successful Save, and still refuses lower tokens.
func TestGuardFailedSaveAdmitsNothing_FailsIfAdmittedUnsaved(t *testing.T) {
	ctx := context.Background()
	fp := &failingPersister{saved: map[string]Admitted{"r": {Token: 3, Holder: "a"}}}
	g := NewGuard(fp)
	fp.fail = true
	ran := false
	err := g.Do(ctx, "r", "a", 4, func(context.Context) error { ran = true; return nil })
	if err == nil || errors.Is(err, ErrStale) || ran {
		t.Fatalf("Do with failing Save: err = %v, ran = %v; want a save error, not run", err, ran)
	}
	if err := g.Check(ctx, "r", "a", 3); !errors.Is(err, ErrStale) {
		t.Fatalf("token 3 after unsaved 4: err = %v, want ErrStale (refusing more is safe)", err)
	}
	if err := g.Check(ctx, "r", "a", 4); err == nil {
		t.Fatal("token 4 admitted while its Save still fails")
	}
	fp.fail = false
	if err := g.Check(ctx, "r", "a", 4); err != nil {
		t.Fatalf("token 4 once Save works: %v", err)
	}
	if fp.saved["r"] != (Admitted{Token: 4, Holder: "a"}) {
		t.Fatalf("saved %+v, want {4 a}", fp.saved["r"])
	}
}

func TestFilePersisterRefusesCorruptFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage":    "{not json",
		"version":    `{"version":3,"terms":{}}`,
		"v2 tokens":  `{"version":2,"tokens":{"r":1}}`,
		"v1 terms":   `{"version":1,"terms":{"r":{"token":1,"holder":"a"}}}`,
		"negative":   `{"version":1,"tokens":{"r":-1}}`,
		"negative2":  `{"version":2,"terms":{"r":{"token":-1,"holder":"a"}}}`,
		"bad holder": `{"version":2,"terms":{"r":{"token":1,"holder":"a b"}}}`,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewFilePersister(path); err == nil {
			t.Errorf("%s: opened a bad token file without error", name)
		}
	}
	if _, err := NewFilePersister(""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty path: err = %v, want ErrInvalid", err)
	}
	// The record never goes down, and no temporary file is left behind.
	path := filepath.Join(dir, "ok.json")
	p, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Save(ctx, "r", Admitted{Token: 9, Holder: "a"})
	p.Save(ctx, "r", Admitted{Token: 2, Holder: "b"})
	p.Save(ctx, "r", Admitted{Token: 9, Holder: "c"})
	p2, _ := NewFilePersister(path)
	if got, _ := p2.Load(ctx, "r"); got != (Admitted{Token: 9, Holder: "a"}) {
		t.Fatalf("after Save 9/a, 2/b, 9/c: %+v, want {9 a}", got)
	}
	if err := p.Save(ctx, "r", Admitted{Token: 10}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Save with an empty holder: err = %v, want ErrInvalid", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "ok.json.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// After a lease store loses data it can grant one token value to two terms.
// The Guard remembers the holder of the highest token and refuses that token
// from another holder; the same term writes again, and a higher token is
// admitted whoever holds it. Comparing only numbers (the old check) admits
// node-b's write below.
func TestGuardRefusesEqualTokenOtherHolder(t *testing.T) {
	ctx := context.Background()
	g := NewGuard(nil)
	var wrote []string
	write := func(who string) func(context.Context) error {
		return func(context.Context) error { wrote = append(wrote, who); return nil }
	}
	if err := g.Do(ctx, "sweeper", "node-a", 3, write("a3")); err != nil {
		t.Fatalf("node-a token 3: %v", err)
	}
	// The store lost data and granted 3 again, to node-b.
	err := g.Do(ctx, "sweeper", "node-b", 3, write("b3"))
	if !errors.Is(err, ErrStale) || !errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-b token 3 after node-a token 3: err = %v, want ErrStale and ErrTokenReused", err)
	}
	var se *StaleError
	if !errors.As(err, &se) || se.Token != 3 || se.Highest != 3 || se.Holder != "node-b" || se.HighestHolder != "node-a" {
		t.Fatalf("StaleError = %+v, want token 3 of node-b refused, highest 3 of node-a", se)
	}
	if !strings.Contains(err.Error(), "two terms") {
		t.Errorf("message %q does not say a token was granted to two terms", err)
	}
	// The same term writes again.
	if err := g.Do(ctx, "sweeper", "node-a", 3, write("a3")); err != nil {
		t.Fatalf("node-a token 3 again: %v", err)
	}
	// A higher token, whoever holds it, is a newer term.
	if err := g.Do(ctx, "sweeper", "node-b", 4, write("b4")); err != nil {
		t.Fatalf("node-b token 4: %v", err)
	}
	if err := g.Check(ctx, "sweeper", "node-a", 4); !errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-a token 4 after node-b token 4: err = %v, want ErrTokenReused", err)
	}
	err = g.Check(ctx, "sweeper", "node-a", 3)
	if !errors.Is(err, ErrStale) || errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-a token 3 after 4: err = %v, want ErrStale and not ErrTokenReused (a lower token)", err)
	}
	if got := strings.Join(wrote, ","); got != "a3,a3,b4" {
		t.Fatalf("writes = %s, want a3,a3,b4", got)
	}
	if h, _ := g.Highest(ctx, "sweeper"); h != (Admitted{Token: 4, Holder: "node-b"}) {
		t.Fatalf("Highest = %+v, want {4 node-b}", h)
	}
}

// The token file keeps the holder with the token, so a restart does not turn
// the highest term into a bare number that another holder could match.
func TestFilePersisterRefusesEqualTokenOtherHolder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.json")
	open := func() *Guard {
		t.Helper()
		p, err := NewFilePersister(path)
		if err != nil {
			t.Fatal(err)
		}
		return NewGuard(p)
	}
	if err := open().Check(ctx, "sweeper", "node-a", 5); err != nil {
		t.Fatal(err)
	}
	g := open() // a restart
	if err := g.Check(ctx, "sweeper", "node-b", 5); !errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-b token 5 after restart: err = %v, want ErrTokenReused", err)
	}
	if err := g.Check(ctx, "sweeper", "node-a", 5); err != nil {
		t.Fatalf("node-a token 5 (the same term) after restart: %v", err)
	}
	if err := g.Check(ctx, "sweeper", "node-c", 6); err != nil {
		t.Fatalf("node-c token 6: %v", err)
	}
	g = open()
	if err := g.Check(ctx, "sweeper", "node-a", 6); !errors.Is(err, ErrTokenReused) {
		t.Fatalf("node-a token 6 after restart: err = %v, want ErrTokenReused", err)
	}
	if err := g.Check(ctx, "sweeper", "node-c", 6); err != nil {
		t.Fatalf("node-c token 6 after restart: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":2,"terms":{"sweeper":{"token":6,"holder":"node-c"}}}`; string(b) != want {
		t.Fatalf("file = %s, want %s", b, want)
	}
}

// A version 1 file (tokens only) is read with every holder unknown: an equal
// token is refused whoever presents it (it might be the other term's), a
// higher one admitted and saved as version 2.
func TestFilePersisterVersion1HolderUnknown(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"tokens":{"sweeper":5}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(p)
	for _, h := range []string{"node-a", "node-b"} {
		if err := g.Check(ctx, "sweeper", h, 5); !errors.Is(err, ErrTokenReused) {
			t.Fatalf("%s token 5 on a version 1 file: err = %v, want ErrTokenReused", h, err)
		}
	}
	if err := g.Check(ctx, "sweeper", "node-b", 4); !errors.Is(err, ErrStale) {
		t.Fatalf("token 4: err = %v, want ErrStale", err)
	}
	if err := g.Check(ctx, "sweeper", "node-b", 6); err != nil {
		t.Fatalf("token 6: %v", err)
	}
	p2, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p2.Load(ctx, "sweeper"); got != (Admitted{Token: 6, Holder: "node-b"}) {
		t.Fatalf("after the upgrade the file holds %+v, want {6 node-b}", got)
	}
}
