package nats

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/store"
)

// What the bucket holds. Each lease name is one key; the key's last message
// is the lease's state:
//
//   - a value (a plain KV put) is a live term, written with a per-message
//     TTL (the Nats-TTL header) that the server counts down on its own clock;
//   - a delete marker (KV-Operation: DEL) written by Release or
//     ForceRelease is a free lease, and its body keeps the last term;
//   - an expiry marker (Nats-Marker-Reason: MaxAge), written by the server
//     itself when a value's TTL ran out, is a free lease too. It carries no
//     body, so it does not say what the expired term's token was.
//
// The body of a value and of our delete markers is a small JSON object.

// value is the JSON body of a term's message.
type value struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Holder string `json:"holder"`
	// Token is the term's fencing token. It is 0 in the message that grants
	// the term: the token is then that message's own revision, which the
	// writer cannot know before the server stores it. Renewals and our
	// delete markers carry it explicitly.
	Token int64 `json:"token,omitempty"`
	// TTLms is the ttl the term was last granted or renewed for, as asked
	// (the Nats-TTL header holds it rounded up to whole seconds).
	TTLms int64  `json:"ttl_ms,omitempty"`
	Meta  string `json:"meta,omitempty"`
	// Event is set on a delete marker: "released" or "force-released".
	Event string `json:"event,omitempty"`
}

// kind is what a key's last message is.
type kind int

const (
	kindValue   kind = iota + 1 // a live term
	kindDeleted                 // our (or anyone's) delete or purge marker
	kindExpired                 // the server's expiry marker
)

// entry is a key's last message as the server stored it.
type entry struct {
	_ [0]func() // not comparable: spares the binary an equality function

	rev  uint64
	at   time.Time // the server's clock when it stored the message
	kind kind
	v    value
	// foreign is set when a value's body is not a leasehold record (a
	// value put by another tool): it is reported, never taken over.
	foreign bool
}

// token is the fencing token of the term the entry shows.
func (e entry) token() int64 {
	if e.v.Token > 0 {
		return e.v.Token
	}
	return int64(e.rev)
}

// KV headers (ADR-8 and the server's own).
const (
	hdrKVOp         = "KV-Operation"
	hdrMarkerReason = "Nats-Marker-Reason"
	hdrTTL          = "Nats-TTL"
	hdrRollup       = "Nats-Rollup"
)

// decodeEntry reads a stored message: its headers (NATS wire form, as
// STREAM.MSG.GET returns them) and body.
func decodeEntry(rev uint64, at time.Time, hdrs, data []byte) entry {
	var h natsio.Header
	if len(hdrs) > 0 {
		h, _ = natsio.DecodeHeadersMsg(hdrs)
	}
	return entryOf(rev, at, h, data)
}

// entryOf reads a stored message from its parsed headers and body.
func entryOf(rev uint64, at time.Time, h natsio.Header, data []byte) entry {
	e := entry{rev: rev, at: at, kind: kindValue}
	switch {
	case h.Get(hdrKVOp) == "DEL" || h.Get(hdrKVOp) == "PURGE":
		e.kind = kindDeleted
	case h.Get(hdrMarkerReason) != "":
		e.kind = kindExpired
	}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &e.v); err != nil {
			e.v = value{}
			e.foreign = e.kind == kindValue
		}
	}
	if e.kind == kindValue && !e.foreign && (store.ValidateHolder(e.v.Holder) != nil || e.v.Token < 0 || e.v.TTLms <= 0) {
		e.foreign = true
	}
	return e
}

// pendingExpiry is the Remaining reported for a value whose time, by the
// server's clock, has run out but which the server has not removed yet (its
// expiry check runs on a timer and may be up to about a second late): the
// key is still held, by the server's own judgement, until the marker comes.
const pendingExpiry = 250 * time.Millisecond

// record turns an entry into the contract's Record. now is the server's
// clock (zero when the entry is not a value and it is not needed).
func (e entry) record(name string, now time.Time) store.Record {
	switch e.kind {
	case kindValue:
		if e.foreign {
			return store.Record{Term: store.Term{Name: name, Holder: foreignHolder, Token: int64(e.rev)}, Remaining: pendingExpiry}
		}
		ttl := time.Duration(e.v.TTLms) * time.Millisecond
		rem := e.at.Add(ttl).Sub(now)
		if rem < pendingExpiry {
			rem = pendingExpiry
		}
		return store.Record{
			Term:      store.Term{Name: name, Holder: e.v.Holder, Token: e.token()},
			Remaining: rem,
			TTL:       ttl,
			Metadata:  e.v.Meta,
		}
	case kindDeleted:
		// Our markers keep the last term's token; anyone else's (nats kv
		// del) shows the marker's revision, above every token before it.
		return store.Record{Term: store.Term{Name: name, Token: e.token()}}
	default:
		// The server's expiry marker does not say what the token was: its
		// own revision is above it, and below the next grant.
		return store.Record{Term: store.Term{Name: name, Token: int64(e.rev)}}
	}
}

// foreignHolder is shown for a value that is not a leasehold record.
const foreignHolder = "(not-a-leasehold-record)"

// Keys. Lease names are letters, digits and - _ . / (store.ValidateName);
// NATS KV keys allow those and '=', but a key's subject may not have an
// empty token: no '.' at the end, none doubled. Such a '.' is written as
// "=2E" ('=' never occurs in a name, so the mapping is one to one and a
// name like "app.leader" stays readable, and addressable by subject
// permissions, as the key "app.leader").

func keyOf(name string) string {
	if !strings.Contains(name, ".") {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '.' && (i == len(name)-1 || name[i+1] == '.') {
			b.WriteString("=2E")
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func nameOf(key string) string { return strings.ReplaceAll(key, "=2E", ".") }

// ttlHeader is the Nats-TTL value for ttl: whole seconds, rounded up. The
// server keeps whole seconds and would drop the fraction, expiring the key
// before the holder stops trusting it; rounded up, the key outlives every
// holder's safe-until.
func ttlHeader(ttl time.Duration) string {
	secs := (ttl + time.Second - 1) / time.Second
	return fmt.Sprintf("%ds", secs)
}
