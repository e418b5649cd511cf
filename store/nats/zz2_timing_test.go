package nats

import (
	"testing"
	"time"
)

func TestZZDirect(t *testing.T) {
	srv := shared(t)
	st := openStore(t, srv.url(), uniqueBucket("zz"))
	ctx := testCtx(t, 30*time.Second)
	st.Enqueue(ctx, "job", "me", 15*time.Second)
	const n = 200
	tm := func(what string, f func()) {
		t0 := time.Now()
		for range n {
			f()
		}
		t.Logf("%s: %v", what, time.Since(t0)/n)
	}
	tm("listQueue", func() { st.listQueue(ctx, "job") })
	tm("msg.get last", func() { st.last(ctx, placeKey("job", "me")) })
	tm("direct last req", func() {
		st.nc.RequestWithContext(ctx, st.api+"DIRECT.GET."+st.stream, []byte(`{"last_by_subj":"`+st.pre+placeKey("job", "me")+`"}`))
	})
	tm("direct multi req (first msg only)", func() {
		st.nc.RequestWithContext(ctx, st.api+"DIRECT.GET."+st.stream, []byte(`{"multi_last":["`+st.pre+queueFilter("job")+`"]}`))
	})
	tm("subscribe+unsub", func() {
		sub, _ := st.nc.SubscribeSync(st.nc.NewInbox())
		sub.Unsubscribe()
	})
}
