package postgres_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// The examples run against the test server on this machine, in their own
// schema, which TestMain drops before and after the run. A real program
// reads its connection string from its configuration, such as
// "postgres://leasehold:secret@db.example.com:5432/app?sslmode=verify-full".
var exampleDSN = testenv.Env("LEASEHOLD_PG_DSN", defaultDSN)

const exampleSchema = "leasehold_example"

// A lock around a critical section; the table is created on first use.
func Example() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, exampleDSN, postgres.Options{Schema: exampleSchema, CreateIfMissing: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	lk, err := leasehold.NewLock(st, "nightly-report", leasehold.Config{Identity: "worker-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	held, err := lk.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Do the work under held.Context(), and send held.Term() (token and
	// holder) with every write to the resource, whose fence refuses an older
	// term: a lower token, or the same token from another holder.
	fmt.Println("worker-1 holds it with token", held.Token())

	other, _ := leasehold.NewLock(st, "nightly-report", leasehold.Config{Identity: "worker-2"})
	_, err = other.TryAcquire(ctx)
	fmt.Println("worker-2 refused:", errors.Is(err, store.ErrHeld))

	held.Release(ctx)
	next, err := other.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after the release worker-2 holds it with token", next.Token())
	next.Release(ctx)
	// Output:
	// worker-1 holds it with token 1
	// worker-2 refused: true
	// after the release worker-2 holds it with token 2
}

// Leader election: the work runs while this node leads, under a context
// cancelled before any rival could take over.
func Example_elector() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, exampleDSN, postgres.Options{Schema: exampleSchema, CreateIfMissing: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	e, err := leasehold.NewElector(st, "billing-leader", leasehold.Config{Identity: "node-a", Metadata: "addr=10.0.0.1:8080"})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
		rec, err := e.Holder(ctx)
		if err != nil {
			return err
		}
		fmt.Println("leading with token", l.Token(), "advertised as", rec.Metadata)
		return nil // returning steps down and releases the lease
	})
	fmt.Println("Run returned", err)
	// Output:
	// leading with token 1 advertised as addr=10.0.0.1:8080
	// Run returned <nil>
}

// Many leases, one process: a Keeper renews all of its leases in one
// statement per renew interval.
func Example_keeper() {
	ctx := context.Background()
	st, err := postgres.Open(ctx, exampleDSN, postgres.Options{Schema: exampleSchema, CreateIfMissing: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	k, err := leasehold.NewKeeper(st, leasehold.Config{Identity: "node-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer k.Close()
	var shards []*leasehold.Lease
	for i := range 3 {
		kp, err := k.TryAcquire(ctx, fmt.Sprintf("partition/%d", i))
		if err != nil {
			fmt.Println(err)
			return
		}
		// Run the partition's work under kp.Context(), writing with kp.Term().
		shards = append(shards, kp)
	}
	fmt.Println("holding", len(k.Terms()), "partitions")
	for _, kp := range shards {
		kp.Release(ctx) // after the partition's work has returned
	}
	fmt.Println("holding", len(k.Terms()), "partitions")
	// Output:
	// holding 3 partitions
	// holding 0 partitions
}

// A postgres:// URL, as the CLI's --store takes it: leasehold's own
// parameters (table, schema, create_if_missing, watch, session_host,
// session_port) are removed, the rest goes to the driver.
func ExampleOpenURL() {
	u, err := url.Parse(exampleDSN)
	if err != nil {
		fmt.Println(err)
		return
	}
	q := u.Query()
	q.Set("table", exampleSchema+".service_leases")
	q.Set("create_if_missing", "true")
	q.Set("application_name", "leasehold-example")
	u.RawQuery = q.Encode()
	st, err := postgres.OpenURL(context.Background(), u)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	fmt.Println(st.(*postgres.Store).Table())
	// Output:
	// "leasehold_example"."service_leases"
}

// Redact is how a connection string appears in leasehold's messages.
func ExampleRedact() {
	fmt.Println(postgres.Redact("postgres://leasehold:s3cret@db.example.com/app?sslmode=verify-full"))
	fmt.Println(postgres.Redact("host=db.example.com user=leasehold password=s3cret"))
	// Output:
	// postgres://leasehold:xxxxx@db.example.com/app?sslmode=verify-full
	// host=db.example.com user=leasehold password=xxxxx
}

func dropExampleSchema() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, exampleDSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+exampleSchema+" CASCADE")
	return err
}

// TestMain gives the examples a fresh schema. Without a server (and outside
// CI) it skips the examples loudly, as the tests skip themselves.
func TestMain(m *testing.M) {
	flag.Parse()
	reachable := false
	if u, err := url.Parse(exampleDSN); err == nil {
		if c, err := net.DialTimeout("tcp", u.Host, 2*time.Second); err == nil {
			c.Close()
			reachable = true
		}
	}
	switch {
	case reachable:
		if err := dropExampleSchema(); err != nil {
			fmt.Fprintf(os.Stderr, "drop the examples' schema: %v\n", err)
			os.Exit(1)
		}
	case !testenv.InCI():
		fmt.Fprintf(os.Stderr, "SKIPPED: the examples need PostgreSQL; %s\n", howToGetPG)
		skip := "^Example"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		flag.Set("test.skip", skip)
	}
	code := m.Run()
	if reachable {
		if err := dropExampleSchema(); err != nil {
			fmt.Fprintf(os.Stderr, "drop the examples' schema: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
