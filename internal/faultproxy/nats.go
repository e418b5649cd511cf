package faultproxy

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
)

// NATSDropper is a client filter (FilterClient: its Filter method) for the
// NATS client protocol: it drops the first n messages a client publishes to
// subjects that begin with a prefix, as a clustered server leaves a
// request unanswered, or diverts them to a subject nobody listens on, so
// that the server answers that nobody does (no responders), as it does for
// a write to a stream whose group has no leader. Everything else passes as
// it is.
type NATSDropper struct {
	prefix  string
	divert  bool
	left    atomic.Int32
	dropped atomic.Int32
}

// NewNATSDropper drops the first n publishes to subjects beginning with
// prefix, over all the connections it filters.
func NewNATSDropper(prefix string, n int32) *NATSDropper {
	d := &NATSDropper{prefix: prefix}
	d.left.Store(n)
	return d
}

// NewNATSDiverter diverts the first n publishes to subjects beginning with
// prefix to a subject nobody listens on; Dropped counts them.
func NewNATSDiverter(prefix string, n int32) *NATSDropper {
	d := NewNATSDropper(prefix, n)
	d.divert = true
	return d
}

// divertedSubject is the subject a diverted publish goes to.
const divertedSubject = "_faultproxy.nobody"

// Dropped is how many publishes were dropped (or diverted) so far.
func (d *NATSDropper) Dropped() int { return int(d.dropped.Load()) }

// Filter copies the client's protocol one operation at a time, leaving out
// the publishes it drops (PUB subject [reply] size, and HPUB subject
// [reply] header-size total-size, each followed by its payload and CRLF).
func (d *NATSDropper) Filter(_ int, dst io.Writer, src io.Reader) error {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		out := []byte(line)
		f := strings.Fields(line)
		if len(f) >= 3 && (strings.EqualFold(f[0], "PUB") || strings.EqualFold(f[0], "HPUB")) {
			size, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return err
			}
			body := make([]byte, size+2)
			if _, err := io.ReadFull(r, body); err != nil {
				return err
			}
			if strings.HasPrefix(f[1], d.prefix) && d.left.Add(-1) >= 0 {
				d.dropped.Add(1)
				if !d.divert {
					continue
				}
				f[1] = divertedSubject
				out = []byte(strings.Join(f, " ") + "\r\n")
			}
			out = append(out, body...)
		}
		if _, err := dst.Write(out); err != nil {
			return err
		}
	}
}
