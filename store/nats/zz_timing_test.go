package nats

import (
	"testing"
	"time"
)

func TestZZTiming(t *testing.T) {
	srv := shared(t)
	st := openStore(t, srv.url(), uniqueBucket("zz"))
	ctx := testCtx(t, 30*time.Second)
	var enq, lst, deq, acq, rel time.Duration
	const n = 200
	for range n {
		t0 := time.Now()
		if _, err := st.Enqueue(ctx, "job", "me", 15*time.Second); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if _, _, err := st.listQueue(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		rec, err := st.Acquire(ctx, "job", "me", 15*time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		t3 := time.Now()
		if err := st.Release(ctx, rec.Term); err != nil {
			t.Fatal(err)
		}
		t4 := time.Now()
		if err := st.Dequeue(ctx, "job", "me"); err != nil {
			t.Fatal(err)
		}
		t5 := time.Now()
		enq += t1.Sub(t0)
		lst += t2.Sub(t1)
		acq += t3.Sub(t2)
		rel += t4.Sub(t3)
		deq += t5.Sub(t4)
	}
	t.Logf("enqueue %v list %v acquire %v release %v dequeue %v", enq/n, lst/n, acq/n, rel/n, deq/n)
}
