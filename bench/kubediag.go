package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/store"
	lhkube "github.com/leasehold/leasehold/store/kubernetes"
)

// Kubernetes in -diag: where a hand-off's time goes. Two contenders, each
// with its own Store (as two processes would have), whose HTTP clients log
// every request: what it was (method, and which object: the Lease, its
// high-water mark, its queue), when it was sent and when its answer came,
// and when each watch delivered bytes. For each hand-off the requests sent
// between the release call and the waiter's acquire returning are counted,
// per side, and the first hand-off of each library is printed as a timeline.

// kubeLog records the requests of one Store.
type kubeLog struct {
	who  string
	mu   sync.Mutex
	reqs []kubeReq
}

type kubeReq struct {
	who        string
	what       string // "GET lease", "PUT hw", "WATCH lease", "watch bytes lease", ...
	sent, done time.Time
	status     int
}

func (l *kubeLog) add(r kubeReq) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

func (l *kubeLog) between(from, to time.Time) []kubeReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []kubeReq
	for _, r := range l.reqs {
		if !r.sent.Before(from) && !r.sent.After(to) {
			out = append(out, r)
		}
	}
	return out
}

// objectKind names the kind of Lease object a name is.
func objectKind(name string) string {
	switch {
	case strings.HasPrefix(name, "leasehold-hw."):
		return "hw"
	case strings.HasPrefix(name, "leasehold-q."):
		return "queue"
	case name == "":
		return "leases"
	}
	return "lease"
}

type loggingRT struct {
	next http.RoundTripper
	log  *kubeLog
}

func (t loggingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	var what string
	if q.Get("watch") == "true" {
		what = "WATCH " + objectKind(strings.TrimPrefix(q.Get("fieldSelector"), "metadata.name="))
	} else {
		p := req.URL.Path
		name := ""
		if i := strings.LastIndex(p, "/leases/"); i >= 0 {
			name = p[i+len("/leases/"):]
		}
		what = req.Method + " " + objectKind(name)
	}
	sent := time.Now()
	resp, err := t.next.RoundTrip(req)
	r := kubeReq{who: t.log.who, what: what, sent: sent, done: time.Now()}
	if err == nil {
		r.status = resp.StatusCode
		if strings.HasPrefix(what, "WATCH") {
			resp.Body = &watchBody{ReadCloser: resp.Body, log: t.log, what: "event on " + strings.TrimPrefix(what, "WATCH ")}
		}
	}
	t.log.add(r)
	return resp, err
}

// watchBody logs each read of a watch's stream that returned bytes: an
// event arriving.
type watchBody struct {
	io.ReadCloser
	log  *kubeLog
	what string
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		now := time.Now()
		b.log.add(kubeReq{who: b.log.who, what: b.what, sent: now, done: now})
	}
	return n, err
}

// newLoggedStore opens a Store of its own on e's server whose requests go to
// a new log.
func (e *kubeEnv) newLoggedStore(who string) (*lhkube.Store, *kubeLog, error) {
	log := &kubeLog{who: who}
	st, err := e.newStore(func(next http.RoundTripper) http.RoundTripper { return loggingRT{next: next, log: log} })
	if err != nil {
		return nil, nil, err
	}
	return st, log, nil
}

// kubeHandoffDiag runs n hand-offs (release 150 ms after the waiter
// started) of each of leasehold's libraries on Kubernetes and reports the
// requests between the release call and the waiter's acquire returning.
func kubeHandoffDiag(ctx context.Context, w io.Writer, e *kubeEnv, ttl, earlyMax time.Duration, n int) {
	n = min(n, 20)
	fmt.Fprintf(w, "\n== Kubernetes hand-off, where the time goes: two contenders, a Store each; %d hand-offs per library, release 150 ms after the waiter started (right after: at a random point of its first %v); requests sent between the release call and the waiter's acquire returning (rel: the releaser's, wait: the waiter's), per hand-off\n", n, earlyMax)
	type mk func(st store.Store) *lib
	variants := []struct {
		name  string
		mk    mk
		early bool // release at a random point of the waiter's first earlyMax
	}{
		{"Elector", func(st store.Store) *lib { return lhElector1("kubernetes", st, ttl, "", false) }, false},
		{"Lock", func(st store.Store) *lib { return lhLock1("kubernetes", st, ttl, "", false) }, false},
		{"Lock (fair)", func(st store.Store) *lib { return lhLock1("kubernetes", st, ttl, "", true) }, false},
		{"Elector (fair)", func(st store.Store) *lib { return lhElector1("kubernetes", st, ttl, "", true) }, false},
		{"Lock (fair), right after", func(st store.Store) *lib { return lhLock1("kubernetes", st, ttl, "", true) }, true},
		{"Elector (fair), right after", func(st store.Store) *lib { return lhElector1("kubernetes", st, ttl, "", true) }, true},
	}
	for _, v := range variants {
		stA, logA, err := e.newLoggedStore("A")
		if err != nil {
			logf("kube diag: %v", err)
			return
		}
		stB, logB, err := e.newLoggedStore("B")
		if err != nil {
			stA.Close()
			logf("kube diag: %v", err)
			return
		}
		name := "diag-" + sanitizeKube(strings.ToLower(v.name)) + "-" + randHex(3)
		a, errA := v.mk(stA).newContender(ctx, name, setup{identity: "a"})
		b, errB := v.mk(stB).newContender(ctx, name, setup{identity: "b"})
		if errA != nil || errB != nil {
			logf("kube diag: %v %v", errA, errB)
			stA.Close()
			stB.Close()
			return
		}
		logs := map[contender]*kubeLog{a: logA, b: logB}
		h, err := a.acquire(ctx)
		if err != nil {
			logf("kube diag %s: %v", v.name, err)
			stA.Close()
			stB.Close()
			continue
		}
		holder, waiter := a, b
		counts := map[string]int{}
		var took []float64
		var timeline, slowLine string
		var samples []string // right after: one line per hand-off
		var slowest float64
		for i := 0; i < n && ctx.Err() == nil; i++ {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			ch := make(chan acqResult, 1)
			started := time.Now()
			go func() {
				hw, err := waiter.acquire(sctx)
				ch <- acqResult{hw, time.Now(), err}
			}()
			delay := 150 * time.Millisecond
			if v.early {
				delay = time.Duration(rand.Int64N(int64(earlyMax)))
			}
			wait(sctx, time.Until(started.Add(delay)))
			rel := time.Now()
			if err := h.release(sctx); err != nil {
				logf("kube diag %s: release: %v", v.name, err)
			}
			relDone := time.Now()
			res := <-ch
			cancel()
			if res.err != nil {
				logf("kube diag %s: waiter: %v", v.name, res.err)
				break
			}
			took = append(took, ms(res.at.Sub(rel)))
			reqs := append(logs[holder].between(rel, res.at), logs[waiter].between(rel, res.at)...)
			sort.Slice(reqs, func(i, j int) bool { return reqs[i].sent.Before(reqs[j].sent) })
			var tl strings.Builder
			fmt.Fprintf(&tl, "    %7.2f  release call, %.1f ms after the waiter started (returned at %.2f)\n", 0.0, ms(rel.Sub(started)), ms(relDone.Sub(rel)))
			// What each side sent before the release call: all of the
			// waiter's start, and the releaser's requests still in flight.
			for _, side := range []struct {
				name     string
				log      *kubeLog
				inFlight bool
			}{{"wait", logs[waiter], false}, {"rel", logs[holder], true}} {
				for _, r := range side.log.between(started, rel) {
					if !strings.HasPrefix(r.what, "event") && (!side.inFlight || r.done.After(rel)) {
						fmt.Fprintf(&tl, "    %7.2f  %-4s %-13s answered at %7.2f%s (sent before the release)\n", ms(r.sent.Sub(rel)), side.name, r.what, ms(r.done.Sub(rel)), statusNote(r.status))
					}
				}
			}
			var seq []string // this hand-off's requests, in order, for its one-line summary
			for _, r := range reqs {
				side := "wait"
				if logs[holder].who == r.who {
					side = "rel"
				}
				st := statusNote(r.status)
				if !strings.HasPrefix(r.what, "event") {
					counts[side+" "+r.what]++
					seq = append(seq, side+" "+r.what+st)
				}
				if r.done.Equal(r.sent) {
					fmt.Fprintf(&tl, "    %7.2f  %-4s %s\n", ms(r.sent.Sub(rel)), side, r.what)
				} else {
					fmt.Fprintf(&tl, "    %7.2f  %-4s %-13s answered at %7.2f%s\n", ms(r.sent.Sub(rel)), side, r.what, ms(r.done.Sub(rel)), st)
				}
			}
			fmt.Fprintf(&tl, "    %7.2f  acquire returned\n", ms(res.at.Sub(rel)))
			if v.early {
				samples = append(samples, fmt.Sprintf("    %6.2f ms  (release %4.1f ms after the waiter started)  %s\n", took[len(took)-1], ms(rel.Sub(started)), strings.Join(seq, ", ")))
			}
			if i == n-1 {
				timeline = tl.String()
			}
			if t := took[len(took)-1]; t > slowest {
				slowest, slowLine = t, tl.String()
			}
			h = res.h
			holder, waiter = waiter, holder
		}
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h.release(rctx)
		cancel()
		a.close()
		b.close()
		stA.Close()
		stB.Close()
		if len(took) == 0 {
			continue
		}
		sort.Float64s(took)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\thand-offs %d\tp50 %.2f ms\tmin %.2f ms\t%s\n", v.name, len(took), took[len(took)/2], took[0], perCycle(counts, len(took)))
		tw.Flush()
		fmt.Fprintf(w, "   the last one (ms from the release call):\n%s", timeline)
		if slowLine != timeline {
			fmt.Fprintf(w, "   the slowest one:\n%s", slowLine)
		}
		if len(samples) > 0 {
			fmt.Fprintf(w, "   each hand-off, in order: ms from the release call, and the requests sent from it to the grant:\n%s", strings.Join(samples, ""))
		}
	}
}

// statusNote is " -> N" for an answer other than 200 or 201 (a conflict:
// 409), and "" otherwise.
func statusNote(status int) string {
	if status != 0 && status != 200 && status != 201 {
		return fmt.Sprintf(" -> %d", status)
	}
	return ""
}
