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
// request unanswered, and passes everything else as it is.
type NATSDropper struct {
	prefix  string
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

// Dropped is how many publishes were dropped so far.
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
				continue
			}
			out = append(out, body...)
		}
		if _, err := dst.Write(out); err != nil {
			return err
		}
	}
}
