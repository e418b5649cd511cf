package fence

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	if err := g.Do(ctx, "sweeper", 2, write(2)); err != nil {
		t.Fatalf("token 2: %v", err)
	}
	err := g.Do(ctx, "sweeper", 1, write(1))
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
	if err := g.Do(ctx, "sweeper", 2, write(2)); err != nil {
		t.Fatalf("token 2 again: %v", err)
	}
	if err := g.Check(ctx, "sweeper", 3); err != nil {
		t.Fatalf("token 3: %v", err)
	}
	if err := g.Check(ctx, "sweeper", 2); !errors.Is(err, ErrStale) {
		t.Fatalf("token 2 after 3: err = %v, want ErrStale", err)
	}
	// Resources are fenced separately.
	if err := g.Check(ctx, "other", 1); err != nil {
		t.Fatalf("other resource, token 1: %v", err)
	}
	if h, _ := g.Highest(ctx, "sweeper"); h != 3 {
		t.Fatalf("Highest = %d, want 3", h)
	}
}

func TestGuardBadInput(t *testing.T) {
	ctx := context.Background()
	g := NewGuard(nil)
	for _, c := range []struct {
		res string
		tok int64
	}{{"", 1}, {"r", 0}, {"r", -5}, {"a\nb", 1}, {string(make([]byte, MaxResourceLen+1)), 1}, {"\xff", 1}} {
		called := false
		err := g.Do(ctx, c.res, c.tok, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, ErrInvalid) || called {
			t.Errorf("Do(%q, %d): err = %v, called = %v; want ErrInvalid, not called", c.res, c.tok, err, called)
		}
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
			err := g.Do(ctx, "r", 1, func(context.Context) error {
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
			if err := g.Do(ctx, "r", 2, func(context.Context) error { set(2); return nil }); err != nil {
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
		go g.Do(context.Background(), "r", 1, func(context.Context) error { close(started); <-release; return nil })
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- g.Do(ctx, "r", 1, func(context.Context) error { return nil }) }()
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
				err := g.Do(ctx, "r", tok, func(context.Context) error {
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
	if err := g.Check(ctx, "sweeper", 5); err != nil {
		t.Fatal(err)
	}
	// A restart: a new persister and guard on the same file.
	p2, err := NewFilePersister(path)
	if err != nil {
		t.Fatal(err)
	}
	g2 := NewGuard(p2)
	var se *StaleError
	if err := g2.Check(ctx, "sweeper", 4); !errors.As(err, &se) || se.Highest != 5 {
		t.Fatalf("token 4 after restart: err = %v, want StaleError with highest 5", err)
	}
	if err := g2.Check(ctx, "sweeper", 5); err != nil {
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
	err = g.Do(ctx, "r", 7, func(context.Context) error {
		fresh, err := NewFilePersister(path)
		if err != nil {
			return err
		}
		if got, _ := fresh.Load(ctx, "r"); got != 7 {
			t.Errorf("during the write the file holds %d, want 7", got)
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
	saved map[string]int64
}

func (f *failingPersister) Load(_ context.Context, r string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.saved[r], nil
}

func (f *failingPersister) Save(_ context.Context, r string, tok int64) error {
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
	fp := &failingPersister{saved: map[string]int64{"r": 3}}
	g := NewGuard(fp)
	fp.fail = true
	ran := false
	err := g.Do(ctx, "r", 4, func(context.Context) error { ran = true; return nil })
	if err == nil || errors.Is(err, ErrStale) || ran {
		t.Fatalf("Do with failing Save: err = %v, ran = %v; want a save error, not run", err, ran)
	}
	if err := g.Check(ctx, "r", 3); !errors.Is(err, ErrStale) {
		t.Fatalf("token 3 after unsaved 4: err = %v, want ErrStale (refusing more is safe)", err)
	}
	if err := g.Check(ctx, "r", 4); err == nil {
		t.Fatal("token 4 admitted while its Save still fails")
	}
	fp.fail = false
	if err := g.Check(ctx, "r", 4); err != nil {
		t.Fatalf("token 4 once Save works: %v", err)
	}
	if fp.saved["r"] != 4 {
		t.Fatalf("saved %d, want 4", fp.saved["r"])
	}
}

func TestFilePersisterRefusesCorruptFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage":  "{not json",
		"version":  `{"version":2,"tokens":{}}`,
		"negative": `{"version":1,"tokens":{"r":-1}}`,
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
	p.Save(ctx, "r", 9)
	p.Save(ctx, "r", 2)
	p2, _ := NewFilePersister(path)
	if got, _ := p2.Load(ctx, "r"); got != 9 {
		t.Fatalf("after Save 9 then 2: %d, want 9", got)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "ok.json.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
