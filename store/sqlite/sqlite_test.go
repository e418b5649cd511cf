package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/store/storetest"
)

// childEnv makes the test binary, re-executed, act as one of the processes of
// TestManyProcessesOneFile instead of running tests.
const childEnv = "LEASEHOLD_SQLITE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(hammer())
	}
	os.Exit(m.Run())
}

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			path := filepath.Join(t.TempDir(), "leases.db")
			return func() (store.Store, error) {
				return sqlite.Open(context.Background(), path, sqlite.Options{})
			}
		},
		MinTTL: 50 * time.Millisecond,
		// A place of 50 ms expired before the next waiter's Enqueue (a
		// BEGIN IMMEDIATE transaction, waiting for the file's lock) counted
		// it, at load 20: the queue cases wait on places of a second.
		QueueTTL: time.Second,
		Losses:   sqliteLosses(),
	})
}

// TestManyProcessesOpenANewFile: processes that open one file that does
// not exist yet, started together (replicas started at once on a new
// store), all succeed. SQLite can answer such an open SQLITE_BUSY without
// waiting out the busy timeout (switching the file to WAL, reading a WAL
// another connection is setting up): a `leasehold run` started beside
// another once exited with "database is locked". The processes open as soon
// as each runs, a few milliseconds apart, with no barrier: that spread is
// what met the race (without the retry in Open, a failure within 60 rounds
// here; with a barrier, none).
func TestManyProcessesOpenANewFile(t *testing.T) {
	const procs, rounds = 3, 60
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < rounds; r++ {
		path := filepath.Join(t.TempDir(), "leases.db")
		var cmds []*exec.Cmd
		var outs []*strings.Builder
		for i := 0; i < procs; i++ {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", "CHILD_OPEN_ONLY=1", "CHILD_DB="+path)
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Errorf("round %d, process %d: %v\n%s", r, i, err, outs[i])
			}
		}
		if t.Failed() {
			return
		}
		st := open(t, path)
		if _, err := st.Get(context.Background(), "any"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("round %d: Get on the new file: %v, want ErrNotFound", r, err)
		}
	}
}

// TestManyProcessesOneFile re-executes the test binary as several processes
// that hammer Acquire/Release on one name in one file. Each records, in a
// table of that same file, when it entered and left its critical section,
// after its Acquire committed and before its Release. In the order SQLite
// committed those records, entries and exits must alternate (one holder at a
// time) and the tokens must rise strictly.
func TestManyProcessesOneFile(t *testing.T) {
	const procs, rounds = 4, 25
	path := filepath.Join(t.TempDir(), "leases.db")
	st := open(t, path)
	if _, err := st.DB().Exec(`CREATE TABLE cs (seq INTEGER PRIMARY KEY AUTOINCREMENT, proc INTEGER, token INTEGER, what TEXT)`); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	var gos []io.WriteCloser
	for i := 0; i < procs; i++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "CHILD_DB="+path, "CHILD_ID="+strconv.Itoa(i), "CHILD_ROUNDS="+strconv.Itoa(rounds))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		// Each child opens the store, then waits for its stdin to close, so
		// that all of them start hammering at once.
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		outs = append(outs, out)
		gos = append(gos, in)
	}
	for _, in := range gos {
		in.Close()
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", i, err, outs[i])
		}
	}
	if t.Failed() {
		return
	}
	rows, err := st.DB().Query(`SELECT proc, token, what FROM cs ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	inside := -1
	entries, switches, prev := 0, 0, -1
	perProc := map[int]int{}
	for rows.Next() {
		var proc int
		var token int64
		var what string
		if err := rows.Scan(&proc, &token, &what); err != nil {
			t.Fatal(err)
		}
		switch what {
		case "enter":
			if inside != -1 {
				t.Fatalf("process %d entered with token %d while process %d was inside", proc, token, inside)
			}
			if token <= last {
				t.Fatalf("process %d entered with token %d, not above the previous %d", proc, token, last)
			}
			inside, last = proc, token
			entries++
			if proc != prev {
				switches++
			}
			prev = proc
			perProc[proc]++
		case "exit":
			if inside != proc || token != last {
				t.Fatalf("process %d left with token %d, but process %d was inside with %d", proc, token, inside, last)
			}
			inside = -1
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if entries != procs*rounds {
		t.Fatalf("%d critical sections recorded, want %d", entries, procs*rounds)
	}
	rec, err := st.Get(context.Background(), "hammer")
	if err != nil {
		t.Fatal(err)
	}
	// Every grant in this test was followed by a release, so there was one
	// grant per critical section and the counter went up by one each time.
	if rec.Token != int64(entries) || rec.Live() {
		t.Fatalf("final record %+v: want a released lease with token %d", rec, entries)
	}
	t.Logf("%d processes, %d critical sections, tokens 1..%d, per process %v, %d hand-overs between processes", procs, entries, last, perProc, switches)
}

// hammer is the child process of TestManyProcessesOneFile.
func hammer() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if os.Getenv("CHILD_OPEN_ONLY") != "" {
		// TestManyProcessesOpenANewFile: open (creating the file) as soon
		// as it runs, and nothing more.
		st, err := sqlite.Open(ctx, os.Getenv("CHILD_DB"), sqlite.Options{})
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		st.Close()
		return 0
	}
	id, _ := strconv.Atoi(os.Getenv("CHILD_ID"))
	rounds, _ := strconv.Atoi(os.Getenv("CHILD_ROUNDS"))
	st, err := sqlite.Open(ctx, os.Getenv("CHILD_DB"), sqlite.Options{NoCreate: true})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer st.Close()
	io.Copy(io.Discard, os.Stdin) // the start barrier: stdin closes when all children run
	holder := fmt.Sprintf("proc-%d-%d", id, os.Getpid())
	for done := 0; done < rounds; {
		rec, err := st.Acquire(ctx, "hammer", holder, time.Minute, "")
		if errors.Is(err, store.ErrHeld) {
			backoff()
			continue
		}
		if err != nil {
			fmt.Println("acquire:", err)
			return 1
		}
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO cs (proc, token, what) VALUES (?, ?, 'enter')`, id, rec.Token); err != nil {
			fmt.Println("record enter:", err)
			return 1
		}
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO cs (proc, token, what) VALUES (?, ?, 'exit')`, id, rec.Token); err != nil {
			fmt.Println("record exit:", err)
			return 1
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			fmt.Println("release:", err)
			return 1
		}
		done++
		backoff() // give the others a chance, so that the lease changes hands
	}
	return 0
}

// backoff waits a millisecond or two, so that the children do not spend two
// cores spinning and so that the lease changes hands between processes.
func backoff() {
	timer := time.NewTimer(time.Duration(500+rand.IntN(2000)) * time.Microsecond)
	<-timer.C
}

// TestRawSQLRecipe runs the classic lease statements by hand, in another
// connection, next to the store: both honour each other's terms.
func TestRawSQLRecipe(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leases.db")
	st := open(t, path)
	raw := st.DB()
	const acquireSQL = `UPDATE leader_lease SET holder = ?2, epoch = epoch + 1,
		expires_at = CAST(unixepoch('subsec')*1000 AS INTEGER) + ?3, ttl_ms = ?3
		WHERE name = ?1 AND (holder IS NULL OR holder = ?2 OR expires_at < CAST(unixepoch('subsec')*1000 AS INTEGER))
		RETURNING epoch`
	if _, err := raw.Exec(`INSERT INTO leader_lease (name) VALUES ('job')`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a row inserted by hand but never granted: err = %v, want ErrNotFound", err)
	}
	// 1. node-a (raw SQL) acquires: epoch 1.
	var epoch int64
	if err := raw.QueryRow(acquireSQL, "job", "node-a", 300).Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("raw acquire: epoch %d, %v; want 1", epoch, err)
	}
	// 2. node-b (the store) gets nothing while it is live, and sees node-a.
	rec, err := st.Acquire(ctx, "job", "node-b", time.Minute, "")
	if !errors.Is(err, store.ErrHeld) || rec.Holder != "node-a" || rec.Token != 1 {
		t.Fatalf("store Acquire while node-a holds: %+v, %v; want ErrHeld with node-a#1", rec, err)
	}
	// 3. node-a's raw term expires on SQLite's clock; node-b takes over with 2.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err = st.Acquire(ctx, "job", "node-b", time.Minute, "")
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("store Acquire after node-a's 300ms term: %v", err)
		}
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
	if rec.Token != 2 {
		t.Fatalf("takeover token %d, want 2", rec.Token)
	}
	// 4. node-a's raw renew with epoch 1 matches nothing.
	res, err := raw.Exec(`UPDATE leader_lease SET expires_at = CAST(unixepoch('subsec')*1000 AS INTEGER) + 300
		WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_at > CAST(unixepoch('subsec')*1000 AS INTEGER)`, "job", "node-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("stale raw renew matched %d rows, want 0", n)
	}
	// 5. The raw acquire is refused while node-b's term is live.
	if err := raw.QueryRow(acquireSQL, "job", "node-a", 300).Scan(&epoch); err == nil {
		t.Fatalf("raw acquire while node-b holds returned epoch %d, want no row", epoch)
	}
	// The guards: a row is never deleted, an epoch never lowered.
	if _, err := raw.Exec(`DELETE FROM leader_lease WHERE name = 'job'`); err == nil || !strings.Contains(err.Error(), "never deleted") {
		t.Fatalf("DELETE of a lease row: err = %v, want refused by the trigger", err)
	}
	if _, err := raw.Exec(`UPDATE leader_lease SET epoch = 0 WHERE name = 'job'`); err == nil || !strings.Contains(err.Error(), "never decreases") {
		t.Fatalf("lowering the epoch: err = %v, want refused by the trigger", err)
	}
	g, err := st.Get(ctx, "job")
	if err != nil || g.Term != rec.Term || !g.Live() {
		t.Fatalf("after refused edits Get = %+v, %v; want %+v live", g, err, rec.Term)
	}
}

func TestHistoryListForceRelease(t *testing.T) {
	ctx := context.Background()
	st := open(t, filepath.Join(t.TempDir(), "leases.db"))
	if _, err := st.Acquire(ctx, "job", "node-a", 50*time.Millisecond, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var b store.Record
	var err error
	for {
		if b, err = st.Acquire(ctx, "job", "node-b", time.Minute, "m"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("takeover: %v", err)
		}
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
	if err := st.Release(ctx, b.Term); err != nil {
		t.Fatal(err)
	}
	c, err := st.Acquire(ctx, "job", "node-c", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	old, err := st.ForceRelease(ctx, "job")
	if err != nil || old.Term != c.Term {
		t.Fatalf("ForceRelease = %+v, %v; want node-c's term %+v", old, err, c.Term)
	}
	if _, err := st.ForceRelease(ctx, "job"); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("second ForceRelease: err = %v, want ErrNotHeld", err)
	}
	if _, err := st.ForceRelease(ctx, "never"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ForceRelease of an unknown name: err = %v, want ErrNotFound", err)
	}
	if _, err := st.Renew(ctx, c.Term, time.Minute); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("evicted holder's Renew: err = %v, want ErrNotHeld", err)
	}
	d, err := st.Acquire(ctx, "job", "node-d", time.Minute, "")
	if err != nil || d.Token != c.Token+1 {
		t.Fatalf("Acquire after force-release = %+v, %v; want token %d", d, err, c.Token+1)
	}
	hist, err := st.History(ctx, "job", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist {
		got = append(got, fmt.Sprintf("%s %s#%d", e.Event, e.Holder, e.Token))
	}
	want := []string{
		"acquired node-d#4",
		"force-released node-c#3",
		"acquired node-c#3",
		"released node-b#2",
		"expired-takeover node-b#2",
		"acquired node-a#1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("History, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range hist {
		if time.Since(e.At) > time.Minute || time.Until(e.At) > time.Minute {
			t.Fatalf("history time %v is not about now", e.At)
		}
	}
	if _, err := st.Acquire(ctx, "other", "node-a", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	list, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "job" || list[1].Name != "other" || list[0].Holder != "node-d" || !list[1].Live() {
		t.Fatalf("List = %+v; want job (node-d) and other, by name", list)
	}
}

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	good := []struct {
		raw   string
		path  string
		table string
	}{
		{"sqlite://" + dir + "/a.db", dir + "/a.db", ""},
		{"sqlite://localhost" + dir + "/b.db?table=my_leases&busy_timeout=2s", dir + "/b.db", "my_leases"},
		{"sqlite:rel/c.db", "rel/c.db", ""},
		{"sqlite:///x%20y.db", "/x y.db", ""},
	}
	for _, c := range good {
		u, err := url.Parse(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		path, opts, err := sqlite.ParseURL(u)
		if err != nil || path != c.path || opts.Table != c.table {
			t.Errorf("ParseURL(%s) = %q, %+v, %v; want %q, table %q", c.raw, path, opts, err, c.path, c.table)
		}
	}
	bad := map[string]string{
		"sqlite://db.example.com/x.db":                        "names a host",
		"sqlite://":                                           "no file path",
		"sqlite:///nonexistent-dir/x.db?tabel=y":              `unknown URL parameter "tabel"`,
		"sqlite:///nonexistent-dir/x.db?busy_timeout=5":       "busy_timeout",
		"sqlite:///nonexistent-dir/x.db?create=maybe":         "create",
		"postgres://u:secret@h/db":                            "not sqlite",
		"sqlite:///nonexistent-dir/x.db?table=x;drop+table":   "URL query",
		"sqlite:///nonexistent-dir/x.db?table=x%3Bdrop+table": "plain SQL identifier",
	}
	for raw, want := range bad {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sqlite.OpenURL(context.Background(), u)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenURL(%s): err = %v; want ErrInvalid mentioning %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("OpenURL(%s): error shows the password: %v", raw, err)
		}
	}
	// The file is created with mode 0600, the schema with it, and reopening
	// with create=false works.
	u, _ := url.Parse("sqlite://" + dir + "/new.db?table=t1")
	st, err := sqlite.OpenURL(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	if !st.(*sqlite.Store).Created() {
		t.Error("Created() = false for a new file")
	}
	st.Close()
	fi, err := os.Stat(dir + "/new.db")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	u, _ = url.Parse("sqlite://" + dir + "/new.db?table=t1&create=false")
	st, err = sqlite.OpenURL(context.Background(), u)
	if err != nil {
		t.Fatalf("reopen with create=false: %v", err)
	}
	if st.(*sqlite.Store).Created() {
		t.Error("Created() = true for an existing file")
	}
	st.Close()
	// create=false: a missing file is an error, a missing table is ErrNoSchema.
	u, _ = url.Parse("sqlite://" + dir + "/missing.db?create=false")
	if _, err := sqlite.OpenURL(context.Background(), u); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("create=false on a missing file: err = %v", err)
	}
	u, _ = url.Parse("sqlite://" + dir + "/new.db?table=t2&create=false")
	st, err = sqlite.OpenURL(context.Background(), u)
	if err != nil {
		t.Fatalf("open with a missing table: %v", err)
	}
	defer st.Close()
	if _, err := st.Get(context.Background(), "x"); !errors.Is(err, sqlite.ErrNoSchema) || !strings.Contains(err.Error(), "leasehold migrate") {
		t.Fatalf("Get on a missing table: err = %v, want ErrNoSchema saying how to create it", err)
	}
	if err := st.(*sqlite.Store).Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := st.Get(context.Background(), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Migrate: err = %v, want ErrNotFound", err)
	}
	// A table of another shape is refused.
	other := open(t, dir+"/shape.db")
	if _, err := other.DB().Exec(`CREATE TABLE odd (name TEXT PRIMARY KEY, holder TEXT, epoch INTEGER, expires_at TEXT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(context.Background(), dir+"/shape.db", sqlite.Options{Table: "odd"}); err == nil || !strings.Contains(err.Error(), "expires_at") {
		t.Fatalf("Open on a table of another shape: err = %v, want it named", err)
	}
}

// TestBusyWaitsForAnotherWriter holds the write lock from another connection
// and checks that a call waits for it (busy timeout) instead of failing.
func TestBusyWaitsForAnotherWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leases.db")
	st := open(t, path)
	other := open(t, path)
	tx, err := other.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE leader_lease SET ttl_ms = ttl_ms WHERE 0`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Acquire(ctx, "job", "node-a", time.Minute, "")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Acquire returned (%v) while another connection held the write lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Acquire after the lock was freed: %v", err)
	}
}

// The expiry is judged by SQLite's clock: the stored expires_at is SQLite's
// unixepoch plus the TTL, whatever the Go process thinks the time is.
func TestExpiryOnSQLiteClock(t *testing.T) {
	ctx := context.Background()
	st := open(t, filepath.Join(t.TempDir(), "leases.db"))
	if _, err := st.Acquire(ctx, "job", "node-a", 10*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := st.DB().QueryRow(`SELECT expires_at - CAST(unixepoch('subsec')*1000 AS INTEGER) FROM leader_lease WHERE name = 'job'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left <= 9000 || left > 10000 {
		t.Fatalf("expires_at is %d ms ahead of SQLite's clock, want about 10000", left)
	}
}

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "leases.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	a, _ := st.Acquire(ctx, "nightly-report", "host-a", 15*time.Second, "")
	_, err = st.Acquire(ctx, "nightly-report", "host-b", 15*time.Second, "")
	fmt.Println("host-a token:", a.Token)
	fmt.Println("host-b:", errors.Is(err, store.ErrHeld))
	st.Release(ctx, a.Term)
	b, _ := st.Acquire(ctx, "nightly-report", "host-b", 15*time.Second, "")
	fmt.Println("host-b token:", b.Token)
	// Output:
	// host-a token: 1
	// host-b: true
	// host-b token: 2
}

// BenchmarkAcquireRelease is one grant and one release: two write
// transactions, each committed with synchronous=FULL (an fsync in WAL mode).
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leases.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for b.Loop() {
		rec, err := st.Acquire(ctx, "bench", "node-a", time.Minute, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Release(ctx, rec.Term); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew is the holder's steady state: one renewal.
func BenchmarkRenew(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leases.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Acquire(ctx, "bench", "node-a", time.Minute, "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.Renew(ctx, rec.Term, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet is a standby's poll.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leases.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Acquire(ctx, "bench", "node-a", time.Minute, ""); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.Get(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
