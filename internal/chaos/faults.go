package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// execute injects the planned faults burst by burst: each fault no earlier
// than its planned time, the faults of a burst together (each on its own
// node), and each burst no earlier than a quiet period after every fault of
// the previous one healed. It stops early once the fleet has injected
// UntilFaults faults.
func (h *harness) execute(ctx context.Context, plan []Planned) error {
	phase := time.Now()
	quiet := quietPeriod(h.cfg.timingsJSON(), h.cfg.Slack)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		healed   time.Time // the last heal of the bursts so far
		firstErr error
	)
	burst, shift := -1, time.Duration(0)
	for _, p := range plan {
		if p.Burst != burst {
			wg.Wait()
			if firstErr != nil {
				return firstErr
			}
			if h.fleet.enough() {
				break
			}
			burst, shift = p.Burst, 0
			// The whole burst moves by as much as its first fault must
			// wait for the previous burst's quiet period.
			if at := phase.Add(p.At); !healed.IsZero() && healed.Add(quiet).After(at) {
				shift = healed.Add(quiet).Sub(at)
			}
		}
		if err := sleepCtx(ctx, time.Until(phase.Add(p.At+shift))); err != nil {
			break // interrupted: check what was recorded
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, ok, err := h.inject(ctx, p)
			if !ok {
				return
			}
			h.fleet.injected.Add(1)
			h.mu.Lock()
			h.faults = append(h.faults, f)
			h.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if end := time.Unix(0, f.End); end.After(healed) {
				healed = end
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	end := phase.Add(h.cfg.Duration)
	if h.fleet.enough() {
		end = time.Now()
	}
	if !healed.IsZero() && healed.Add(quiet).After(end) {
		end = healed.Add(quiet)
	}
	sleepCtx(ctx, time.Until(end))
	return nil
}

// target picks the process a node fault hits and marks its slot busy until
// release is called: the leader if p aims at it and it is not already under
// a fault of the same burst, else node p.Node, else the first free node. ok
// is false when every node is busy.
func (h *harness) target(leader *proc, p Planned) (target *proc, release func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	free := func(q *proc) bool { return q != nil && !h.busy[q.slot] && h.procs[q.slot] == q }
	switch {
	case p.Leader && free(leader):
		target = leader
	case free(h.procs[fmt.Sprintf("n%d", p.Node+1)]):
		target = h.procs[fmt.Sprintf("n%d", p.Node+1)]
	default:
		for i := 0; i < h.cfg.Nodes && target == nil; i++ {
			if q := h.procs[fmt.Sprintf("n%d", i+1)]; free(q) {
				target = q
			}
		}
	}
	if target == nil {
		return nil, nil, false
	}
	slot := target.slot
	h.busy[slot] = true
	return target, func() {
		h.mu.Lock()
		delete(h.busy, slot)
		h.mu.Unlock()
	}, true
}

// inject carries out one planned fault and returns its record; ok is false
// when it was not injected because every node was already under a fault.
func (h *harness) inject(ctx context.Context, p Planned) (f fault, ok bool, err error) {
	rec, leader := h.leader(ctx)
	target := leader
	if p.Kind != faultStoreRestart {
		var release func()
		if target, release, ok = h.target(leader, p); !ok {
			return fault{}, false, nil
		}
		defer release()
	}
	f = fault{Kind: p.Kind, Leader: leader != nil && target == leader}
	if target != nil {
		f.Target = target.name
	}
	if rec.Live() {
		f.Token = rec.Token
		if f.Leader && rec.Name != h.lease {
			f.Lease = rec.Name
		}
	}
	role := "standby"
	if f.Leader {
		role = fmt.Sprintf("leader, token %d", rec.Token)
	}
	f.Start = time.Now().UnixNano()
	switch p.Kind {
	case faultPause:
		h.progress("chaos: %s pause %s (%s) for %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("SIGSTOP for %v", p.Duration.Round(time.Millisecond))
		if err = signalStop(target.cmd.Process); err == nil {
			sleepCtx(ctx, p.Duration)
			if err = signalCont(target.cmd.Process); err != nil && target.gone(err) {
				err = nil // another fault ended it meanwhile (a twin stopped)
				f.Detail += "; the process ended before it was continued"
			}
		}
	case faultKill:
		h.progress("chaos: %s kill %s (%s), restart after %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		target.killed = true
		target.cmd.Process.Kill()
		<-target.exited
		sleepCtx(ctx, p.Duration)
		var np *proc
		np, err = h.startProc(ctx, target.slot, target.identity, target.offset)
		if err == nil {
			f.Detail = fmt.Sprintf("SIGKILL, restarted as %s after %v", np.name, p.Duration.Round(time.Millisecond))
		}
	case faultBlackhole:
		h.progress("chaos: %s blackhole %s (%s) for %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("no bytes forwarded for %v", p.Duration.Round(time.Millisecond))
		for _, px := range target.proxies {
			px.Blackhole()
		}
		sleepCtx(ctx, p.Duration)
		for _, px := range target.proxies {
			px.EndBlackhole() // a store restart overlapping it keeps refusing
		}
	case faultReset:
		n := 0
		for _, px := range target.proxies {
			_, before := px.Stats()
			px.Reset()
			_, after := px.Stats()
			n += after - before
		}
		h.progress("chaos: %s reset %s (%s): %d connections", h.elapsed(), target.name, role, n)
		f.Detail = fmt.Sprintf("%d connections reset", n)
	case faultLatency:
		h.progress("chaos: %s latency +%v on %s (%s) for %v", h.elapsed(), p.Latency.Round(time.Millisecond), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("+%v per round trip for %v", p.Latency.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		for _, px := range target.proxies {
			px.SetLatency(p.Latency)
		}
		sleepCtx(ctx, p.Duration)
		for _, px := range target.proxies {
			px.SetLatency(0)
		}
	case faultStoreRestart:
		f.Target, f.Leader = "store", false
		if h.cfg.StoreControl != nil {
			// One store, one restart at a time, felt by every group.
			h.fleet.restartMu.Lock()
			defer h.fleet.restartMu.Unlock()
			f.Start = time.Now().UnixNano()
			h.progress("chaos: %s restart the store (down %v)", h.elapsed(), p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("real restart, down %v", p.Duration.Round(time.Millisecond))
			defer func() { h.fleet.echo(h, f) }()
			// A store that dies resets its connections; the proxies do it at
			// once, so that a store that stops gracefully does not wait for
			// the nodes' open streams.
			all := h.fleet.allProxies()
			for _, px := range all {
				px.Refuse(true)
				px.Reset()
			}
			if err = h.cfg.StoreControl.Stop(ctx); err == nil {
				sleepCtx(ctx, p.Duration)
				err = h.cfg.StoreControl.Start(context.WithoutCancel(ctx))
			}
			for _, px := range all {
				px.Refuse(false)
			}
		} else {
			h.progress("chaos: %s store restart, emulated at the proxies (down %v)", h.elapsed(), p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("emulated: every connection reset and new ones refused for %v", p.Duration.Round(time.Millisecond))
			all := h.allProxies()
			for _, px := range all {
				px.Refuse(true)
				px.Reset()
			}
			sleepCtx(ctx, p.Duration)
			for _, px := range all {
				px.Refuse(false)
			}
		}
	case faultClock:
		h.progress("chaos: %s clock of %s (%s): rate %.3f, step +%v, for %v", h.elapsed(), target.name, role, p.Rate, p.Step.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("rate %.3f, step +%v, for %v", p.Rate, p.Step.Round(time.Millisecond), p.Duration.Round(time.Millisecond))
		if _, err = fmt.Fprintf(target.stdin, "clock %s %s\n", strconv.FormatFloat(p.Rate, 'f', 4, 64), p.Step); err == nil {
			sleepCtx(ctx, p.Duration)
			if _, err = fmt.Fprintf(target.stdin, "clock 1 0s\n"); err != nil && target.gone(err) {
				// Another fault ended the process meanwhile (a twin
				// stopped, a kill): its clock goes with it. A 25-minute
				// soak was lost to this as a run error.
				err = nil
				f.Detail += "; the process ended before its clock was set back"
			}
		}
	case faultTwin:
		twinSlot := target.slot + "b"
		var tw *proc
		tw, err = h.startProc(ctx, twinSlot, target.identity, target.offset)
		if err == nil {
			h.progress("chaos: %s twin %s started with %s's identity %q (%s) for %v", h.elapsed(), tw.name, target.name, target.identity, role, p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("%s runs with identity %q (as %s does) for %v", tw.name, target.identity, target.name, p.Duration.Round(time.Millisecond))
			f.Target = tw.name
			sleepCtx(ctx, p.Duration)
			h.stopProc(tw, h.cfg.Timings.LeaseDuration+5*time.Second)
			h.mu.Lock()
			delete(h.procs, twinSlot)
			h.mu.Unlock()
		}
	default:
		err = fmt.Errorf("%w: unknown fault %q", ErrInvalid, p.Kind)
	}
	f.End = time.Now().UnixNano()
	if err != nil {
		f.Err = err.Error()
		if ctx.Err() != nil {
			return f, true, nil
		}
		return f, true, fmt.Errorf("leasehold/chaos: inject %s on %s: %w", p.Kind, f.Target, err)
	}
	return f, true, nil
}
