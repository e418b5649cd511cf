package chaos

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// execute injects the planned faults, each no earlier than its planned time
// and no earlier than a quiet period after the previous one healed.
func (h *harness) execute(ctx context.Context, plan []Planned) error {
	phase := time.Now()
	quiet := quietPeriod(h.cfg.timingsJSON(), h.cfg.Slack)
	var healed time.Time
	for _, p := range plan {
		at := phase.Add(p.At)
		if !healed.IsZero() && healed.Add(quiet).After(at) {
			at = healed.Add(quiet)
		}
		if err := sleepCtx(ctx, time.Until(at)); err != nil {
			return nil // interrupted: check what was recorded
		}
		f, err := h.inject(ctx, p)
		h.mu.Lock()
		h.faults = append(h.faults, f)
		h.mu.Unlock()
		if err != nil {
			return err
		}
		healed = time.Unix(0, f.End)
	}
	end := phase.Add(h.cfg.Duration)
	if !healed.IsZero() && healed.Add(quiet).After(end) {
		end = healed.Add(quiet)
	}
	sleepCtx(ctx, time.Until(end))
	return nil
}

// inject carries out one planned fault and returns its record.
func (h *harness) inject(ctx context.Context, p Planned) (fault, error) {
	rec, leader := h.leader(ctx)
	target := leader
	if !p.Leader || target == nil {
		h.mu.Lock()
		target = h.procs[fmt.Sprintf("n%d", p.Node+1)]
		h.mu.Unlock()
	}
	f := fault{Kind: p.Kind, Target: target.name, Leader: leader != nil && target == leader}
	if rec.Live() {
		f.Token = rec.Token
	}
	role := "standby"
	if f.Leader {
		role = fmt.Sprintf("leader, token %d", rec.Token)
	}
	f.Start = time.Now().UnixNano()
	var err error
	switch p.Kind {
	case faultPause:
		h.progress("chaos: %s pause %s (%s) for %v", h.elapsed(), target.name, role, p.Duration.Round(time.Millisecond))
		f.Detail = fmt.Sprintf("SIGSTOP for %v", p.Duration.Round(time.Millisecond))
		if err = signalStop(target.cmd.Process); err == nil {
			sleepCtx(ctx, p.Duration)
			err = signalCont(target.cmd.Process)
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
			px.Heal()
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
			px.Heal()
		}
	case faultStoreRestart:
		f.Target, f.Leader = "store", false
		if h.cfg.StoreControl != nil {
			h.progress("chaos: %s restart the store (down %v)", h.elapsed(), p.Duration.Round(time.Millisecond))
			f.Detail = fmt.Sprintf("real restart, down %v", p.Duration.Round(time.Millisecond))
			// A store that dies resets its connections; the proxies do it at
			// once, so that a store that stops gracefully does not wait for
			// the nodes' open streams.
			all := h.allProxies()
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
			_, err = fmt.Fprintf(target.stdin, "clock 1 0s\n")
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
			return f, nil
		}
		return f, fmt.Errorf("leasehold/chaos: inject %s on %s: %w", p.Kind, f.Target, err)
	}
	return f, nil
}
