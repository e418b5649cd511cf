package chaos

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// Porcupine model of a fenced register: a write is accepted if and only if its
// term is the last accepted one or newer: its token is higher than the last
// accepted token, or equal to it and from the same writer (the holder of that
// term writing again). An equal token from another writer is another term
// that was granted the same token, and is refused. A read returns the last
// accepted write.

type regInput struct {
	Resource string
	Read     bool
	Token    int64
	Writer   string // the writing process: the holder of the term
	Value    string
}

type regOutput struct {
	Accepted bool
	Value    string
	Token    int64
}

type regState struct {
	Value  string
	Token  int64
	Writer string `json:",omitempty"` // the holder of the last accepted term
}

// registerModel is the porcupine model of one fenced register, partitioned
// by resource.
func registerModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byRes := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				r := op.Input.(regInput).Resource
				if _, ok := byRes[r]; !ok {
					order = append(order, r)
				}
				byRes[r] = append(byRes[r], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, r := range order {
				out = append(out, byRes[r])
			}
			return out
		},
		Init: func() any { return regState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(regState), input.(regInput), output.(regOutput)
			if in.Read {
				return out.Value == s.Value && out.Token == s.Token, s
			}
			accept := in.Token > s.Token || (in.Token == s.Token && in.Writer == s.Writer)
			if out.Accepted != accept {
				return false, s
			}
			if accept {
				return true, regState{Value: in.Value, Token: in.Token, Writer: in.Writer}
			}
			return true, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(regInput), output.(regOutput)
			if in.Read {
				return fmt.Sprintf("read(%s) -> %q #%d", in.Resource, out.Value, out.Token)
			}
			return fmt.Sprintf("write(%s, %q, #%d) -> accepted=%v", in.Resource, in.Value, in.Token, out.Accepted)
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			return fmt.Sprintf("%q #%d", s.Value, s.Token)
		},
	}
}

// operationsOf turns a history into porcupine operations: each write with the
// answer its node got and each successful read. A write without a definite
// answer is resolved from the register's log: if the register accepted it, it
// is an accepted write whose return is unknown (concurrent with everything
// after its call); otherwise it had no effect and is left out.
func operationsOf(h *history) []porcupine.Operation {
	c := &checker{h: h, opts: checkOptions{}, res: &Result{}}
	c.index()
	return c.operations()
}

func (c *checker) operations() []porcupine.Operation {
	var ops []porcupine.Operation
	const never = math.MaxInt64 / 2
	for _, w := range c.writes {
		in := regInput{Resource: w.call.Resource, Token: w.call.Token, Writer: w.call.Proc(), Value: w.call.Value}
		switch w.result {
		case writeAccepted, writeRefused:
			ops = append(ops, porcupine.Operation{Input: in, Call: w.call.Wall, Output: regOutput{Accepted: w.result == writeAccepted}, Return: w.ret.Wall})
		default:
			for _, r := range c.logVal[w.call.Value] {
				if r.Result == writeAccepted {
					ops = append(ops, porcupine.Operation{Input: in, Call: w.call.Wall, Output: regOutput{Accepted: true}, Return: never})
					break
				}
			}
		}
	}
	for _, r := range c.h.Reads {
		if r.Err != "" {
			continue
		}
		ops = append(ops, porcupine.Operation{Input: regInput{Resource: r.Resource, Read: true}, Call: r.Call,
			Output: regOutput{Value: r.Value, Token: r.Token}, Return: r.Return})
	}
	return ops
}

func (c *checker) checkLinearizable() string {
	ops := c.operations()
	model := registerModel()
	res := porcupine.CheckOperationsTimeout(model, ops, c.opts.LinearizeTimeout)
	c.res.Stats.Linearizable = string(res)
	switch res {
	case porcupine.Illegal:
		// Name the resources whose histories cannot be linearized.
		for _, part := range model.Partition(ops) {
			if porcupine.CheckOperationsTimeout(model, part, c.opts.LinearizeTimeout) != porcupine.Illegal {
				continue
			}
			r := part[0].Input.(regInput).Resource
			c.violate(Violation{Resource: r, Msg: fmt.Sprintf("the history of resource %s (%d operations) is not linearizable as a fenced register: some write was accepted or refused, or some read returned a value, that no order of the operations explains", r, len(part))})
		}
		if c.cur.Violations == 0 { // only the whole history is illegal (cannot happen with a sound partition)
			c.violate(Violation{Msg: fmt.Sprintf("the register's history of %d operations is not linearizable as a fenced register", len(ops))})
		}
	case porcupine.Unknown:
		c.inconclude = fmt.Sprintf("porcupine did not finish within %v", c.opts.LinearizeTimeout)
	}
	return fmt.Sprintf("%d operations", len(ops))
}
