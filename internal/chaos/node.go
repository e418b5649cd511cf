package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Opener opens the store a URL names (the leasehold command's registry, or a
// test's).
type Opener func(ctx context.Context, u *url.URL) (store.Store, error)

// nodeReady is the line a node prints on stdout once it contends.
type nodeReady struct {
	Holder string `json:"holder"`
	PID    int    `json:"pid"`
}

// NodeMain is the chaos node program: it contends for a lease with the
// leasehold library and, while it leads, writes to the fenced register with
// its token, recording everything in its history file. The harness starts it
// as a separate process (the leasehold command's hidden node subcommand, or a
// test binary) and controls it with signals and with lines on its stdin:
//
//	clock RATE STEP   set the node's clock rate and step it forward (e.g. "clock 1.1 200ms")
//
// It exits when its context ends (SIGTERM, via the caller) or stdin closes
// (the harness went away). It returns the exit code.
func NodeMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, open Opener) int {
	if err := runNode(ctx, args, stdin, stdout, open); err != nil {
		fmt.Fprintf(stderr, "chaos node: %v\n", err)
		if errors.Is(err, ErrInvalid) {
			return 2
		}
		return 1
	}
	return 0
}

type nodeConfig struct {
	node, identity, storeURL, lease, history string
	inc                                      int
	reg                                      registerSpec
	resources                                []string
	timings                                  leasehold.Timings
	writeInterval, think, writeTimeout       time.Duration
	clockOffset                              time.Duration
	clockRate                                float64
	broken                                   string
	mode                                     string
	slots                                    int
	every                                    time.Duration
	fair                                     bool
}

func parseNodeFlags(args []string) (*nodeConfig, error) {
	c := &nodeConfig{}
	fs := flag.NewFlagSet("chaos node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.node, "node", "", "process slot name")
	fs.StringVar(&c.identity, "identity", "", "configured identity")
	fs.IntVar(&c.inc, "inc", 1, "incarnation")
	fs.StringVar(&c.storeURL, "store", "", "store URL (through the fault proxy)")
	fs.StringVar(&c.lease, "lease", "", "lease name")
	fs.StringVar(&c.history, "history", "", "history file")
	fs.StringVar(&c.reg.Kind, "register-kind", registerHTTP, "register kind")
	fs.StringVar(&c.reg.URL, "register", "", "register address")
	fs.StringVar(&c.reg.Table, "register-table", "", "register table")
	unfenced := fs.Bool("unfenced", false, "write without the token check (negative control)")
	res := fs.String("resources", "r0", "comma-separated resources")
	fs.DurationVar(&c.timings.LeaseDuration, "lease-duration", 0, "")
	fs.DurationVar(&c.timings.RenewDeadline, "renew-deadline", 0, "")
	fs.DurationVar(&c.timings.RenewInterval, "renew-interval", 0, "")
	fs.DurationVar(&c.timings.RetryPeriod, "retry-period", 0, "")
	fs.Float64Var(&c.timings.Jitter, "jitter", 0, "")
	fs.DurationVar(&c.timings.WindDown, "wind-down", 0, "")
	fs.DurationVar(&c.writeInterval, "write-interval", 10*time.Millisecond, "")
	fs.DurationVar(&c.think, "think", 0, "")
	fs.DurationVar(&c.writeTimeout, "write-timeout", time.Second, "")
	fs.DurationVar(&c.clockOffset, "clock-offset", 0, "")
	fs.Float64Var(&c.clockRate, "clock-rate", 1, "")
	fs.StringVar(&c.broken, "broken-store", "", "break the store this way (negative control only)")
	fs.StringVar(&c.mode, "mode", ModeElector, "elector, semaphore or schedule")
	fs.BoolVar(&c.fair, "fair", false, "the elector waits in the fair queue (Config.Fair)")
	fs.IntVar(&c.slots, "slots", 0, "a semaphore's slots")
	fs.DurationVar(&c.every, "every", 0, "a schedule's period")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c.reg.Fenced = !*unfenced
	c.resources = strings.Split(*res, ",")
	switch {
	case c.node == "" || c.identity == "" || c.storeURL == "" || c.lease == "" || c.history == "" || c.reg.URL == "":
		return nil, fmt.Errorf("%w: --node, --identity, --store, --lease, --history and --register are required", ErrInvalid)
	case c.writeInterval <= 0 || c.writeTimeout <= 0 || c.think < 0:
		return nil, fmt.Errorf("%w: --write-interval and --write-timeout must be positive, --think not negative", ErrInvalid)
	case c.mode == ModeSemaphore && (c.slots < 1 || len(c.resources) != c.slots+cond1(c.broken == brokenExtraSlot)):
		return nil, fmt.Errorf("%w: a semaphore node needs --slots N and one resource per slot", ErrInvalid)
	case c.mode == ModeSchedule && c.every <= 0:
		return nil, fmt.Errorf("%w: a schedule node needs --every", ErrInvalid)
	case c.mode != ModeElector && c.mode != ModeSemaphore && c.mode != ModeSchedule:
		return nil, fmt.Errorf("%w: --mode %q", ErrInvalid, c.mode)
	}
	if c.broken != "" {
		if err := validBroken(c.broken); err != nil {
			return nil, err
		}
	}
	if err := c.timings.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c.timings = c.timings.WithDefaults()
	return c, nil
}

func runNode(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, open Opener) error {
	c, err := parseNodeFlags(args)
	if err != nil {
		return err
	}
	start := time.Now()
	clock, err := newDriftClock(c.clockOffset, c.clockRate)
	if err != nil {
		return err
	}
	clockStart := clock.Now()
	rel := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return int64(t.Sub(clockStart))
	}
	f, err := os.OpenFile(c.history, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	hw := &historyWriter{f: f, node: c.node, inc: c.inc, start: start, clock: func() int64 { return rel(clock.Now()) }}
	if c.mode == ModeElector {
		hw.single = c.lease
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Time in which the OS did not run this process while it worked is
	// recorded, so that the checker can tell a node that overran its
	// safeUntil because it was not run from one that ran on regardless.
	stalls := newStallRecorder(hw, stallPeriod, stallThreshold)
	// The harness controls the node through stdin; EOF means it is gone.
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 3 && fields[0] == "clock" {
				rate, err1 := strconv.ParseFloat(fields[1], 64)
				step, err2 := time.ParseDuration(fields[2])
				if err := errors.Join(err1, err2); err != nil {
					hw.emit(event{Kind: evClock, Err: err.Error()})
					continue
				}
				// A reading just before the change and one just after bound
				// the moment of the step, for the checker's interpolation.
				hw.emit(event{Kind: evClockBefore})
				if err := clock.Set(rate, step); err != nil {
					hw.emit(event{Kind: evClock, Err: err.Error()})
					continue
				}
				hw.emit(event{Kind: evClock, Detail: fmt.Sprintf("rate %v step %v", rate, step)})
			}
		}
	}()

	u, err := url.Parse(c.storeURL)
	if err != nil {
		return fmt.Errorf("%w: store URL does not parse", ErrInvalid)
	}
	st, err := retryOpen(ctx, func(ctx context.Context) (store.Store, error) { return open(ctx, u) })
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	// The recorder sits between the elector and the (possibly broken) store:
	// it records what the elector sent and got, on clocks the elector does
	// not report.
	rs, err := newRecStore(st, hw, c.broken)
	if err != nil {
		return err
	}
	st = rs
	reg, err := retryOpen(ctx, func(ctx context.Context) (registerClient, error) { return openRegisterClient(ctx, c.reg) })
	if err != nil {
		return fmt.Errorf("open register: %w", err)
	}
	defer reg.Close()

	var mu sync.Mutex
	var acqLatency time.Duration
	onEvent := func(ev leasehold.Event) {
		lease := hw.leaseOf(ev.Name)
		switch ev.Kind {
		case leasehold.EventAcquireAttempt:
			switch {
			case ev.Err == nil:
				mu.Lock()
				acqLatency = ev.Latency
				mu.Unlock()
			case !leasehold.OutcomeOf(ev.Err).Definite(): // a definite refusal granted nothing
				hw.emit(event{Kind: evAcquireErr, Token: ev.Term.Token, Latency: int64(ev.Latency), Err: errString(ev.Err), Lease: lease})
			}
		case leasehold.EventAcquired:
			mu.Lock()
			lat := acqLatency
			mu.Unlock()
			hw.emit(event{Kind: evAcquired, Holder: ev.Term.Holder, Token: ev.Term.Token, SafeUntil: rel(ev.SafeUntil), Latency: int64(lat), Lease: lease})
		case leasehold.EventRenewed:
			hw.emit(event{Kind: evRenewed, Token: ev.Term.Token, SafeUntil: rel(ev.SafeUntil), Latency: int64(ev.Latency), Lease: lease})
		case leasehold.EventRenewFailed:
			hw.emit(event{Kind: evRenewFailed, Token: ev.Term.Token, SafeUntil: rel(ev.SafeUntil), Latency: int64(ev.Latency), Err: errString(ev.Err), Lease: lease})
		case leasehold.EventLost:
			hw.emit(event{Kind: evLost, Token: ev.Term.Token, SafeUntil: rel(ev.SafeUntil), Reason: leasehold.LossReason(ev.Err), Err: errString(ev.Err), Lease: lease})
		case leasehold.EventReleased:
			hw.emit(event{Kind: evReleased, Token: ev.Term.Token, Latency: int64(ev.Latency), Err: errString(ev.Err), Lease: lease})
		}
	}
	lcfg := leasehold.Config{Identity: c.identity, Timings: c.timings, Clock: clock, OnEvent: onEvent, Fair: c.fair}
	var identity string
	var run func(context.Context, leasehold.WorkFunc) error
	switch c.mode {
	case ModeSemaphore:
		run, identity, err = semaphoreNode(c, st, lcfg, hw)
	case ModeSchedule:
		run, identity, err = scheduleNode(c, st, lcfg, hw, clock)
	default:
		var e *leasehold.Elector
		if e, err = leasehold.NewElector(st, c.lease, lcfg); err == nil {
			identity = e.Identity()
			run = e.Run
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	hw.emit(event{Kind: evStart, Identity: c.identity, Holder: identity, PID: os.Getpid(),
		Detail: fmt.Sprintf("clock offset %v rate %v", c.clockOffset, c.clockRate)})
	b, _ := json.Marshal(nodeReady{Holder: identity, PID: os.Getpid()})
	fmt.Fprintf(stdout, "%s\n", b)

	var op int64
	work := func(ctx context.Context, l *leasehold.Lease) error {
		tok := l.Token()
		if c.broken == brokenForgeToken {
			tok++ // negative control: a token this term does not own
		}
		if c.broken == brokenOverrun {
			// Negative control: work that does not stop when told, and
			// writes on past its safeUntil.
			stop := ctx
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(context.WithoutCancel(stop))
			defer cancel()
			go func() {
				<-stop.Done()
				t := time.NewTimer(c.timings.WindDown + 300*time.Millisecond)
				defer t.Stop()
				<-t.C
				cancel()
			}()
		}
		lease := hw.leaseOf(l.Name())
		resources := c.resources
		if c.mode == ModeSemaphore {
			// The slot's own resource: the register fences per slot.
			resources = []string{c.resources[slotIndex(c.lease, l.Name())%len(c.resources)]}
		}
		defer stalls.workStarted()() // deferred first: it records until the work's last event is written
		hw.emit(event{Kind: evWorkStart, Token: tok, SafeUntil: rel(l.SafeUntil()), Lease: lease})
		defer func() { hw.emit(event{Kind: evWorkStop, Token: tok, SafeUntil: rel(l.SafeUntil()), Lease: lease}) }()
		pace := time.NewTimer(0)
		defer pace.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-pace.C:
			}
			// When both were ready, select chose at random: a work told to
			// stop must not start another write (a soak caught one that did,
			// after a stall, and returned past safeUntil).
			if ctx.Err() != nil {
				return nil
			}
			res := resources[i%len(resources)]
			op++
			value := fmt.Sprintf("%s#%d", procName(c.node, c.inc), op)
			// The work between deciding to write and the write landing. It
			// does not look at the lease: a write already on its way is not
			// recalled when the lease runs out, and a pause that lands here
			// sends it late. Stopping such writes is the fence's job.
			if c.think > 0 {
				think := time.NewTimer(c.think)
				<-think.C
			}
			hw.emit(event{Kind: evWriteCall, Op: op, Token: tok, Resource: res, Value: value, SafeUntil: rel(l.SafeUntil()), Lease: lease})
			wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), c.writeTimeout)
			ok, err := reg.Write(wctx, res, tok, value, procName(c.node, c.inc))
			wcancel()
			result := writeRefused
			switch {
			case err != nil:
				result = writeUnknown
			case ok:
				result = writeAccepted
			}
			hw.emit(event{Kind: evWriteReturn, Op: op, Token: tok, Resource: res, Value: value, Result: result, Err: errString(err), Lease: lease})
			pace.Reset(c.writeInterval)
		}
	}
	err = run(ctx, work)
	hw.emit(event{Kind: evExit, Err: errString(err)})
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// cond1 is 1 if b, else 0.
func cond1(b bool) int {
	if b {
		return 1
	}
	return 0
}

// retryOpen calls open until it succeeds or ctx ends: a node restarted while
// the store is briefly unreachable waits for it.
func retryOpen[T any](ctx context.Context, open func(context.Context) (T, error)) (T, error) {
	var zero T
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := open(octx)
		cancel()
		if err == nil {
			return v, nil
		}
		if errors.Is(err, ErrInvalid) || errors.Is(err, store.ErrInvalid) {
			return zero, err
		}
		// To the node's stderr log: a node that never gets ready says why.
		fmt.Fprintf(os.Stderr, "%s open: %v\n", time.Now().Format(time.RFC3339Nano), err)
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
