package cli

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// The status page: one HTML file, a script and a style sheet, served by the
// binary itself (no build step, nothing fetched from elsewhere).
//
//go:embed web
var webFiles embed.FS

// maxWatches bounds the store watches one status page holds open; leases
// beyond it are seen at the next poll.
const maxWatches = 64

// statusPage serves the status page of one store and its API:
//
//	GET /                      the page
//	GET /static/...            its script and style sheet
//	GET /api/leases            the current snapshot (JSON)
//	GET /api/events            the snapshots as they change (server-sent events)
//	GET /api/history?lease=N   the terms of lease N, newest first (JSON)
//
// One goroutine (run) reads the leases every interval, and at once when a
// store watch says one may have changed, while someone looks (an open event
// stream, or a request of /api/leases): a `run --http` nobody looks at adds
// no load on the store. Every open page gets each snapshot.
type statusPage struct {
	st        store.Store
	storeName string
	// names are the leases to show; empty means every lease (store.Lister).
	names        []string
	interval     time.Duration
	timeout      time.Duration
	historyLimit int
	// self, when set, says whether a live record is a term this process
	// (run) holds, marked on the page.
	self func(store.Record) bool

	mu      sync.Mutex
	snap    []byte
	at      time.Time     // when snap was read
	changed chan struct{} // closed and replaced when snap changes
	viewers int           // open event streams
	wanted  chan struct{} // a viewer arrived, or a reading was asked for (coalesced)
	done    chan struct{} // closed when run returns: event streams end
}

// newStatusPage checks that the page can show something: named leases, or a
// store that lists its leases.
func newStatusPage(st store.Store, storeName string, names []string, interval, timeout time.Duration, historyLimit int) (*statusPage, error) {
	if len(names) == 0 {
		if _, ok := st.(store.Lister); !ok {
			return nil, usagef("store %s cannot list its leases: name the leases to show with --lease", storeName)
		}
	}
	return &statusPage{
		st: st, storeName: storeName, names: names,
		interval: interval, timeout: timeout, historyLimit: historyLimit,
		changed: make(chan struct{}), done: make(chan struct{}), wanted: make(chan struct{}, 1),
	}, nil
}

// pageSnapshot is what /api/leases and each event of /api/events carry.
type pageSnapshot struct {
	Store string `json:"store"`
	// At is the wall-clock time of the read, for display.
	At time.Time `json:"at"`
	// Listed: every lease of the store; otherwise only the named ones.
	Listed  bool        `json:"listed"`
	History bool        `json:"history"` // the store keeps a history (store.Historian)
	Watch   bool        `json:"watch"`   // the store pushes changes (store.Watcher)
	Leases  []leaseView `json:"leases"`
	Error   string      `json:"error,omitempty"`
}

// run refreshes the snapshot until ctx ends. Its caller waits for it.
func (p *statusPage) run(ctx context.Context) {
	defer close(p.done)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	watched := map[string]bool{}
	var watchMu sync.Mutex
	w, canWatch := p.st.(store.Watcher)
	reread := false
	for {
		// Read only while someone looks (or once, when asked).
		if !p.looked() {
			select {
			case <-ctx.Done():
				return
			case <-p.wanted:
			}
		}
		recs, err := p.read(ctx)
		if ctx.Err() != nil {
			return
		}
		p.publish(recs, err)
		subscribed := false
		if canWatch {
			for _, r := range recs {
				watchMu.Lock()
				if watched[r.Name] || len(watched) >= maxWatches {
					watchMu.Unlock()
					continue
				}
				ch, err := w.Watch(ctx, r.Name)
				if err != nil {
					watchMu.Unlock()
					continue // polled instead
				}
				watched[r.Name] = true
				watchMu.Unlock()
				subscribed = true
				wg.Add(1)
				go func(name string) {
					defer wg.Done()
					for range ch {
						select {
						case wake <- struct{}{}:
						default:
						}
					}
					// The watch ended: the next read subscribes again.
					watchMu.Lock()
					delete(watched, name)
					watchMu.Unlock()
				}(r.Name)
			}
		}
		if subscribed && !reread {
			// A change between the read and the new watch would be missed:
			// read once more now that the watch is on (once: a watch that
			// breaks at once is not resubscribed in a tight loop).
			reread = true
			continue
		}
		reread = false
		t := time.NewTimer(p.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// read returns the leases to show: the named ones (a never-granted name is
// free, token 0), or every lease.
func (p *statusPage) read(ctx context.Context) ([]store.Record, error) {
	rctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if len(p.names) == 0 {
		return p.st.(store.Lister).List(rctx)
	}
	out := make([]store.Record, 0, len(p.names))
	for _, n := range p.names {
		rec, err := p.st.Get(rctx, n)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rec = store.Record{Term: store.Term{Name: n}}
		case err != nil:
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// publish makes a snapshot of recs (or of the error) the current one.
func (p *statusPage) publish(recs []store.Record, err error) {
	snap := pageSnapshot{Store: p.storeName, At: time.Now(), Listed: len(p.names) == 0, Leases: []leaseView{}}
	_, snap.History = p.st.(store.Historian)
	_, snap.Watch = p.st.(store.Watcher)
	if err != nil {
		snap.Error = fmt.Sprintf("reading the leases: %v", err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	for _, r := range recs {
		v := leaseJSON(r, r.Name)
		v.Self = p.self != nil && r.Live() && p.self(r)
		snap.Leases = append(snap.Leases, v)
	}
	b, _ := json.Marshal(snap)
	p.mu.Lock()
	p.snap, p.at = b, time.Now()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// looked reports whether someone looks at the page: an open event stream,
// or a pending request for a reading.
func (p *statusPage) looked() bool {
	select {
	case <-p.wanted:
		return true
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.viewers > 0
}

// want asks run for a reading.
func (p *statusPage) want() {
	select {
	case p.wanted <- struct{}{}:
	default:
	}
}

// view counts a viewer until the returned func is called.
func (p *statusPage) view() (leave func()) {
	p.mu.Lock()
	p.viewers++
	p.mu.Unlock()
	p.want()
	return func() {
		p.mu.Lock()
		p.viewers--
		p.mu.Unlock()
	}
}

// current returns the latest snapshot (nil before the first read) and a
// channel closed when it is replaced.
func (p *statusPage) current() ([]byte, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap, p.changed
}

// routes adds the page and its API to mux.
func (p *statusPage) routes(mux *http.ServeMux) {
	static, _ := fs.Sub(webFiles, "web")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /api/leases", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		snap, changed, fresh := p.snap, p.changed, time.Since(p.at) < p.interval
		p.mu.Unlock()
		if snap == nil || !fresh { // ask for a reading and wait for it
			p.want()
			t := time.NewTimer(p.timeout)
			defer t.Stop()
			select {
			case <-changed:
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			snap, _ = p.current()
		}
		if snap == nil {
			http.Error(w, "no reading of the store yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(snap)
	})
	mux.HandleFunc("GET /api/events", p.serveEvents)
	mux.HandleFunc("GET /api/history", p.serveHistory)
}

// pageHeaders keeps the page to its own files: no inline script, nothing
// loaded from another origin.
func pageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
}

// serveEvents streams every snapshot as a server-sent event named "leases",
// until the client leaves or the page stops.
func (p *statusPage) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	leave := p.view()
	defer leave()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", p.interval.Milliseconds()+1000)
	flusher.Flush()
	for {
		snap, changed := p.current()
		if snap != nil {
			fmt.Fprintf(w, "event: leases\ndata: %s\n\n", snap)
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-p.done:
			return
		}
	}
}

// termView is one term of a lease on the page's timeline.
type termView struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Token    int64      `json:"token"`
	Holder   string     `json:"holder"`
	Metadata string     `json:"metadata,omitempty"`
	Started  *time.Time `json:"started,omitempty"` // nil: before the history kept
	Ended    *time.Time `json:"ended,omitempty"`   // nil: still held, or the end was not recorded
	// End says how the term ended: "holding" (it is the live term),
	// "released", "force-released", "expired" (a rival took over after it
	// expired, or it expired and nobody took over), "replaced" (its holder
	// acquired again and got a new term), or "unknown".
	End string `json:"end"`
}

type historyResponse struct {
	Lease   string     `json:"lease"`
	History bool       `json:"history"` // false: the store keeps no history
	Terms   []termView `json:"terms"`
	Error   string     `json:"error,omitempty"`
}

func (p *statusPage) serveHistory(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("lease")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	resp := historyResponse{Lease: name, Terms: []termView{}}
	if err := store.ValidateName(name); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		resp.Error = "lease: " + err.Error()
		json.NewEncoder(w).Encode(resp)
		return
	}
	h, ok := p.st.(store.Historian)
	if !ok {
		json.NewEncoder(w).Encode(resp)
		return
	}
	resp.History = true
	ctx, cancel := context.WithTimeout(r.Context(), p.timeout)
	defer cancel()
	entries, err := h.History(ctx, name, p.historyLimit)
	if err == nil {
		var cur store.Record
		cur, err = p.st.Get(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
		resp.Terms = termsOf(entries, cur)
	}
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		resp.Error = fmt.Sprintf("reading the history of %s: %v", name, err)
	}
	json.NewEncoder(w).Encode(resp)
}

// termsOf turns a lease's history (newest first, as Historian returns it)
// and its current record into terms, newest first.
func termsOf(entries []store.HistoryEntry, cur store.Record) []termView {
	var terms []termView // oldest first while building
	open := func() *termView {
		if n := len(terms); n > 0 && terms[n-1].End == "" {
			return &terms[n-1]
		}
		return nil
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		at := e.At
		switch e.Event {
		case "acquired", "expired-takeover":
			if o := open(); o != nil {
				o.Ended = &at
				switch {
				case e.Event == "expired-takeover" || o.Holder != e.Holder:
					o.End = "expired"
				default:
					o.End = "replaced"
				}
			}
			terms = append(terms, termView{Token: e.Token, Holder: e.Holder, Metadata: e.Metadata, Started: &at})
		case "released", "force-released":
			o := open()
			if o == nil || o.Token != e.Token {
				// The history kept begins after this term's grant.
				terms = append(terms, termView{Token: e.Token, Holder: e.Holder, Metadata: e.Metadata})
				o = &terms[len(terms)-1]
			}
			o.Ended, o.End = &at, e.Event
		}
	}
	if o := open(); o != nil {
		switch {
		case cur.Token == o.Token && cur.Live():
			o.End = "holding"
		case cur.Token == o.Token && cur.Holder != "":
			o.End = "expired" // and nobody took over yet; the store recorded no time
		default:
			o.End = "unknown"
		}
	}
	out := make([]termView, 0, len(terms))
	for i := len(terms) - 1; i >= 0; i-- {
		out = append(out, terms[i])
	}
	return out
}
