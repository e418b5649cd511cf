// The encoding of leases in Redis: the keys of a lease, its term record,
// and the scripts' replies.

package redis

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// keys are the keys of lease name: the lock, the counter and the term.
func (s *Store) keys(name string) []string {
	lock := s.prefix + "{" + name + "}"
	return []string{lock, lock + ":token", lock + ":term"}
}

// termKeys are the keys renewScript and releaseScript are sent: the lock
// and the term record.
func (s *Store) termKeys(name string) []string {
	lock := s.prefix + "{" + name + "}"
	return []string{lock, lock + ":term"}
}

// LockKey is the Redis key that holds the holder string of lease name: the
// key a redislock or redsync client must use to exclude leasehold holders.
func (s *Store) LockKey(name string) string { return s.keys(name)[0] }

// channel is the pub/sub channel of lease name. The scripts name it from
// the lock key: KEYS[1] .. ':events'.
func (s *Store) channel(name string) string { return s.prefix + "{" + name + "}:events" }

// tokenArg is how the scripts are sent a term's token: "token:", the prefix
// of its term record.
func tokenArg(tok int64) string {
	var b [24]byte
	return string(append(strconv.AppendInt(b[:0], tok, 10), ':'))
}

// termRecord is a term record as the scripts store it, "token:ttl:metadata".
type termRecord struct {
	token, ttlMs int64
	metadata     string
}

// parseTermRecord reads a term record; the empty string (no record: a lock
// key written by another library) is the zero record.
func parseTermRecord(v string) (termRecord, error) {
	if v == "" {
		return termRecord{}, nil
	}
	tok, rest, ok1 := strings.Cut(v, ":")
	ttl, md, ok2 := strings.Cut(rest, ":")
	t, err1 := strconv.ParseInt(tok, 10, 64)
	ms, err2 := strconv.ParseInt(ttl, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return termRecord{}, fmt.Errorf("malformed term record %.40q", v)
	}
	return termRecord{token: t, ttlMs: ms, metadata: md}, nil
}

// record is the Record of a term read from Redis: holder, term record and
// PTTL as the scripts return them.
func record(name, holder string, tr termRecord, pttl int64) store.Record {
	return store.Record{
		Term:      store.Term{Name: name, Holder: holder, Token: tr.token},
		Remaining: remaining(pttl),
		TTL:       time.Duration(tr.ttlMs) * time.Millisecond,
		Metadata:  tr.metadata,
	}
}

// reply reads a script's array reply; the first malformed element sets err.
type reply struct {
	v   []any
	err error
}

func (r *reply) at(i int) any {
	if i >= len(r.v) {
		if r.err == nil {
			r.err = fmt.Errorf("script reply has %d elements, want more than %d", len(r.v), i)
		}
		return nil
	}
	return r.v[i]
}

func (r *reply) int(i int) int64 {
	switch x := r.at(i).(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("script reply element %d: %w", i, err)
		}
		return n
	case nil:
		return 0
	default:
		if r.err == nil {
			r.err = fmt.Errorf("script reply element %d is %T, want an integer", i, x)
		}
		return 0
	}
}

// term reads a term record (see parseTermRecord).
func (r *reply) term(i int) termRecord {
	tr, err := parseTermRecord(r.str(i))
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("script reply element %d: %w", i, err)
	}
	return tr
}

func (r *reply) str(i int) string {
	switch x := r.at(i).(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		if r.err == nil {
			r.err = fmt.Errorf("script reply element %d is %T, want a string", i, x)
		}
		return ""
	}
}
