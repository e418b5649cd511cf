package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/faultstore"
)

// The interop tests share one Lease between client-go's own LeaderElector
// (resourcelock.LeaseLock) and leasehold electors on this store.
const interopLease = "interop"

// Timings of both kinds of elector. client-go keeps its leader until its
// renewals have failed for RenewDeadline, up to one RetryPeriod after the last
// success: 1.25 s, below the 2 s any contender waits. leasehold's holder
// stops trusting its term 1.2 s after its last successful renewal was sent,
// 1.3 s before its lease expires: the margin must exceed the one-second
// resolution at which client-go tells renewals apart (store.Limits).
const (
	cgLeaseDuration = 2 * time.Second
	cgRenewDeadline = time.Second
	cgRetryPeriod   = 250 * time.Millisecond
)

var lhTimings = leasehold.Timings{
	LeaseDuration: 2500 * time.Millisecond,
	RenewDeadline: 1200 * time.Millisecond,
	RenewInterval: 400 * time.Millisecond,
	RetryPeriod:   250 * time.Millisecond,
}

// monitor records who leads, on this process's monotonic clock, and every
// moment two lead at once.
type monitor struct {
	t  testing.TB
	mu sync.Mutex
	// leading is the set of participants whose guarded work runs now.
	leading    map[string]bool
	terms      []leadership
	violations []string
}

type leadership struct {
	who, kind string
	token     int64
	start     time.Time
	end       time.Time
}

func newMonitor(t testing.TB) *monitor { return &monitor{t: t, leading: map[string]bool{}} }

// begin is called by a participant's guarded work when it starts.
func (m *monitor) begin(who, kind string, token int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for other := range m.leading {
		m.violations = append(m.violations, fmt.Sprintf("%s (%s, token %d) began leading while %s still led", who, kind, token, other))
	}
	m.leading[who] = true
	m.terms = append(m.terms, leadership{who: who, kind: kind, token: token, start: time.Now()})
	m.t.Logf("leader: %s (%s), token %d", who, kind, token)
}

// end is called by a participant's guarded work when it stops.
func (m *monitor) end(who string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leading, who)
	for i := len(m.terms) - 1; i >= 0; i-- {
		if m.terms[i].who == who {
			m.terms[i].end = time.Now()
			break
		}
	}
}

// leader returns the participant leading now, or "".
func (m *monitor) leader() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for who := range m.leading {
		return who
	}
	return ""
}

// waitLeader waits until someone other than not leads, and returns them.
func (m *monitor) waitLeader(not string, timeout time.Duration) string {
	m.t.Helper()
	var who string
	eventually(m.t, timeout, 10*time.Millisecond, "a new leader other than "+not, func() (bool, error) {
		who = m.leader()
		return who != "" && who != not, nil
	})
	return who
}

func (m *monitor) snapshot() ([]leadership, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]leadership(nil), m.terms...), append([]string(nil), m.violations...)
}

// participant is one elector, of either kind.
type participant interface {
	name() string
	kind() string
	// stop ends the participant as its owner would: its work stops, it gives
	// the lease back if it is configured to, and it exits.
	stop()
	// crash cuts the participant off from the API server: it stops leading
	// when its own rule says so, and gives nothing back. Call stop after.
	crash()
}

// lhParticipant is a leasehold Elector on this store, behind a fault
// wrapper that can cut it off.
type lhParticipant struct {
	id     string
	faults *faultstore.Store
	cancel context.CancelFunc
	done   chan struct{}
}

func startLeasehold(t testing.TB, m *monitor, ns, id string) *lhParticipant {
	t.Helper()
	return startLeaseholdWith(t, m, ns, id, lhTimings)
}

func startLeaseholdWith(t testing.TB, m *monitor, ns, id string, timings leasehold.Timings) *lhParticipant {
	t.Helper()
	fs := faultstore.New(openStore(t, apiserver(t).AdminConfig(), ns))
	e, err := leasehold.NewElector(fs, interopLease, leasehold.Config{Identity: id, Timings: timings})
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &lhParticipant{id: id, faults: fs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		e.Run(ctx, func(ctx context.Context, l *leasehold.Lease) error {
			m.begin(id, "leasehold", l.Token())
			<-ctx.Done()
			m.end(id)
			return nil
		})
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *lhParticipant) name() string { return p.id }
func (p *lhParticipant) kind() string { return "leasehold" }
func (p *lhParticipant) crash()       { p.faults.Inject(faultstore.Fault{Mode: faultstore.Fail}) }

// stop cancels Run: the work's context ends, the work returns, and the
// elector releases the lease (unless crashed).
func (p *lhParticipant) stop() {
	p.cancel()
	<-p.done
}

// cgParticipant is client-go's LeaderElector on a LeaseLock.
type cgParticipant struct {
	id       string
	release  bool // ReleaseOnCancel
	lock     *cutLock
	cancel   context.CancelFunc
	done     chan struct{}
	stopWork chan struct{}
	stopOnce sync.Once
	started  chan struct{} // closed when OnStartedLeading is called
	workDone chan struct{} // closed when it returns
}

func startClientGo(t testing.TB, m *monitor, ns, id string, releaseOnCancel bool) *cgParticipant {
	t.Helper()
	client := adminClient(t)
	lock := &cutLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: interopLease, Namespace: ns},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}}
	p := &cgParticipant{id: id, release: releaseOnCancel, lock: lock, done: make(chan struct{}), stopWork: make(chan struct{}), started: make(chan struct{}), workDone: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cgLeaseDuration,
		RenewDeadline:   cgRenewDeadline,
		RetryPeriod:     cgRetryPeriod,
		ReleaseOnCancel: releaseOnCancel,
		Name:            id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				defer close(p.workDone)
				close(p.started)
				select {
				case <-p.stopWork:
					return // stopped before it began: do not begin
				default:
				}
				l, err := client.CoordinationV1().Leases(ns).Get(ctx, interopLease, metav1.GetOptions{})
				token := int64(-1)
				if err == nil && l.Spec.LeaseTransitions != nil {
					token = int64(*l.Spec.LeaseTransitions)
				}
				m.begin(id, "client-go", token)
				select {
				case <-ctx.Done():
				case <-p.stopWork:
				}
				m.end(id)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatalf("NewLeaderElector: %v", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	p.cancel = cancel
	go func() {
		defer close(p.done)
		le.Run(ctx)
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *cgParticipant) name() string { return p.id }
func (p *cgParticipant) kind() string { return "client-go" }
func (p *cgParticipant) crash()       { p.lock.cut() }

// stop follows client-go's rule for ReleaseOnCancel: the guarded work is
// done before the context is cancelled (client-go releases before it
// cancels the work's context).
func (p *cgParticipant) stop() {
	p.stopOnce.Do(func() { close(p.stopWork) })
	select {
	case <-p.started:
		// It leads: wait for its work. (If it began leading after
		// stopWork was closed, its work returned without beginning.)
		<-p.workDone
	default:
		// It never led, and now never will begin work.
	}
	p.cancel()
	<-p.done
}

// cutLock is a client-go resource lock that can be cut off from the server:
// every call then fails at once, as with a partition or a dead process.
type cutLock struct {
	resourcelock.Interface
	mu  sync.Mutex
	off bool
}

var errCut = errors.New("cut off from the API server")

func (l *cutLock) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.off = true
}

func (l *cutLock) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.off
}

func (l *cutLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.isCut() {
		return nil, nil, errCut
	}
	return l.Interface.Get(ctx)
}

func (l *cutLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.isCut() {
		return errCut
	}
	return l.Interface.Create(ctx, ler)
}

func (l *cutLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.isCut() {
		return errCut
	}
	return l.Interface.Update(ctx, ler)
}

// TestClientGoInterop runs client-go's LeaderElector and leasehold electors
// on one Lease. Leaders stop (with and without releasing), crash and hand
// over in both directions; at no moment do two of them lead, and every new
// leader's token (leaseTransitions) is above the one before.
func TestClientGoInterop(t *testing.T) {
	ns := namespace(t)
	m := newMonitor(t)
	const takeover = 20 * time.Second // an expiry takeover needs ~2-3 s

	seq := 0
	next := func(kind string) string { seq++; return fmt.Sprintf("%s-%d", kind, seq) }
	type transition struct{ from, to, how string }
	var transitions []transition
	// handOver stops the current leader by how, and waits for the next one.
	handOver := func(cur participant, how string, all map[string]participant) participant {
		t.Helper()
		switch how {
		case "crash":
			cur.crash()
		default:
			cur.stop()
			how = "release" // a leasehold elector releases when stopped
			if cg, ok := cur.(*cgParticipant); ok && !cg.release {
				how = "stop"
			}
		}
		who := m.waitLeader(cur.name(), takeover)
		if how == "crash" {
			cur.stop()
		}
		nextP := all[who]
		transitions = append(transitions, transition{cur.kind(), nextP.kind(), how})
		t.Logf("%s (%s) %s -> %s (%s)", cur.name(), cur.kind(), how, who, nextP.kind())
		delete(all, cur.name())
		return nextP
	}
	all := map[string]participant{}
	add := func(p participant) participant { all[p.name()] = p; return p }

	// Scripted: each direction of takeover, by release, by stop without
	// release (expiry) and by crash.
	cur := add(startClientGo(t, m, ns, next("cg"), true))
	if who := m.waitLeader("", takeover); who != cur.name() {
		t.Fatalf("first leader %s, want %s", who, cur.name())
	}
	add(startLeasehold(t, m, ns, next("lh")))
	cur = handOver(cur, "release", all) // client-go -> leasehold, ReleaseOnCancel
	add(startClientGo(t, m, ns, next("cg"), false))
	cur = handOver(cur, "crash", all) // leasehold -> client-go, expiry
	add(startLeasehold(t, m, ns, next("lh")))
	cur = handOver(cur, "stop", all) // client-go -> leasehold, expiry (no release)
	add(startClientGo(t, m, ns, next("cg"), true))
	cur = handOver(cur, "release", all) // leasehold -> client-go, release
	add(startLeasehold(t, m, ns, next("lh")))
	cur = handOver(cur, "crash", all) // client-go -> leasehold, expiry after a crash

	// Random rounds: the next leader's kind is drawn at random. Idle
	// contenders of the other kind step aside for the hand-over (leasehold's
	// watch and its timer set to the exact expiry would otherwise win nearly
	// every race against client-go's polling) and come back after it, so that
	// every leader is contended by both kinds while it leads.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	start := func(kind string) participant {
		if kind == "leasehold" {
			return add(startLeasehold(t, m, ns, next("lh")))
		}
		return add(startClientGo(t, m, ns, next("cg"), rng.IntN(2) == 0))
	}
	other := map[string]string{"leasehold": "client-go", "client-go": "leasehold"}
	start(other[cur.kind()])
	for range 8 {
		nextKind := []string{"leasehold", "client-go"}[rng.IntN(2)]
		idle := 0
		for name, p := range all {
			switch {
			case p == cur:
			case p.kind() != nextKind:
				p.stop()
				delete(all, name)
			default:
				idle++
			}
		}
		if idle == 0 {
			start(nextKind)
		}
		cur = handOver(cur, []string{"stop", "crash"}[rng.IntN(2)], all)
		if cur.kind() != nextKind {
			t.Fatalf("leader %s is %s; only %s contenders were running", cur.name(), cur.kind(), nextKind)
		}
		start(other[nextKind])
	}
	for _, p := range all {
		p.stop()
	}

	terms, violations := m.snapshot()
	for _, v := range violations {
		t.Errorf("two leaders: %s", v)
	}
	var gaps []time.Duration
	for i := 1; i < len(terms); i++ {
		gaps = append(gaps, terms[i].start.Sub(terms[i-1].end).Round(time.Millisecond))
		if terms[i].token <= terms[i-1].token {
			t.Errorf("leader %s (%s) got token %d, not above %s's %d", terms[i].who, terms[i].kind, terms[i].token, terms[i-1].who, terms[i-1].token)
		}
	}
	dirs := map[string]int{}
	for _, tr := range transitions {
		dirs[tr.from+" -> "+tr.to]++
	}
	t.Logf("%d leaderships, takeovers: %v", len(terms), dirs)
	t.Logf("time from one leader's end to the next one's start: %v", gaps)
	if dirs["client-go -> leasehold"] == 0 || dirs["leasehold -> client-go"] == 0 {
		t.Errorf("takeovers %v: want both directions", dirs)
	}
}

// TestClientGoAtResolutionBoundary: client-go tells two renewals apart only
// at whole seconds, so a leasehold margin (leaseDuration - renewDeadline) of a
// second or less could let it take over before the leasehold holder stops
// trusting its term (203 ms of two leaders were measured at 1 s leases).
// NewElector refuses such margins on this store, naming the rule; just above
// the boundary, with several renewals a second, client-go takes over from a
// crashed leasehold holder only after that holder stopped, in every round.
func TestClientGoAtResolutionBoundary(t *testing.T) {
	ns := namespace(t)
	st := openStore(t, apiserver(t).AdminConfig(), ns)
	for _, margin := range []time.Duration{time.Second, 800 * time.Millisecond, 300 * time.Millisecond} {
		tm := leasehold.Timings{LeaseDuration: 1200*time.Millisecond + margin, RenewDeadline: 1200 * time.Millisecond, RenewInterval: 300 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}
		_, err := leasehold.NewElector(st, interopLease, leasehold.Config{Identity: "x", Timings: tm})
		if !errors.Is(err, leasehold.ErrInvalidConfig) || !strings.Contains(err.Error(), "time resolution 1s") {
			t.Errorf("margin %v: NewElector = %v, want ErrInvalidConfig naming the store's time resolution", margin, err)
		}
	}
	boundary := leasehold.Timings{LeaseDuration: 2300 * time.Millisecond, RenewDeadline: 1200 * time.Millisecond, RenewInterval: 300 * time.Millisecond, RetryPeriod: 250 * time.Millisecond}
	m := newMonitor(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	const rounds = 4
	for i := range rounds {
		lh := startLeaseholdWith(t, m, ns, fmt.Sprintf("lh-%d", i), boundary)
		if who := m.waitLeader("", 20*time.Second); who != lh.name() {
			t.Fatalf("round %d: %s leads, want %s", i, who, lh.name())
		}
		cg := startClientGo(t, m, ns, fmt.Sprintf("cg-%d", i), true)
		// Cut the holder off at a random phase of its renewals, so some
		// rounds cut it right after two renewals within one second.
		phase := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		<-phase.C
		lh.crash()
		if who := m.waitLeader(lh.name(), 20*time.Second); who != cg.name() {
			t.Fatalf("round %d: %s leads after the crash, want %s", i, who, cg.name())
		}
		lh.stop()
		cg.stop() // releases: the next round's leasehold elector takes over at once
	}
	terms, violations := m.snapshot()
	for _, v := range violations {
		t.Errorf("two leaders: %s", v)
	}
	if len(terms) != 2*rounds {
		t.Errorf("%d leaderships, want %d", len(terms), 2*rounds)
	}
	for i := 1; i < len(terms); i += 2 {
		t.Logf("round %d: %s stopped, %s began %v later", i/2, terms[i-1].who, terms[i].who, terms[i].start.Sub(terms[i-1].end).Round(time.Millisecond))
	}
}
