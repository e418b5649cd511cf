package zookeeper

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Node names. A contender node of leasehold is named
//
//	_c_<16 hex: the holder's hash><16 hex: random>-lock-<sequence>
//
// the form of go-zookeeper/zk's CreateProtectedEphemeralSequential and of
// Curator's protected mode ("_c_" + an id, then "-lock-" and the server's
// 10-digit sequence), so that zk.Lock and Curator's InterProcessMutex, which
// order the children of a lock path by the number after the last "lock-",
// order leasehold's nodes with their own. The holder's hash lets a handle
// find its holder's earlier nodes without reading every child; the random
// part makes each attempt's node name unique, so that an attempt whose
// answer was lost can find its node again.

const (
	protectedPrefix = "_c_"
	lockMarker      = "lock-"
)

// holderHash is the holder part of a node name.
func holderHash(holder string) string {
	h := sha256.Sum256([]byte(holder))
	return hex.EncodeToString(h[:8])
}

// newNodePrefix is the name of a new contender node before the server
// appends its sequence.
func newNodePrefix(holder string) string {
	var r [8]byte
	rand.Read(r[:])
	return protectedPrefix + holderHash(holder) + hex.EncodeToString(r[:]) + "-" + lockMarker
}

// placeMark is the first character of the random part of a place's node
// name (a fair waiter's, see queue.go), at placeMarkAt: 'q' is not a hex
// digit, so no attempt's node carries it there.
const (
	placeMark   = 'q'
	placeMarkAt = len(protectedPrefix) + 16 // after the holder's hash
)

// newPlacePrefix is the name of a new place node before the server appends
// its sequence: a contender node's name whose random part starts with
// placeMark.
func newPlacePrefix(holder string) string {
	n := []byte(newNodePrefix(holder))
	n[placeMarkAt] = placeMark
	return string(n)
}

// isPlace reports whether the child name is a leasehold place: a node that
// queues (and, once lowest, holds), not an attempt that deletes itself when
// it is not the lowest.
func isPlace(child string) bool {
	return strings.HasPrefix(child, protectedPrefix) && len(child) > placeMarkAt && child[placeMarkAt] == placeMark
}

// prefixOf is a contender node's name without its sequence.
func prefixOf(child string) string {
	return strings.TrimRight(child, "0123456789")
}

// isHolders reports whether the child name is a leasehold node of holder.
func isHolders(child, holder string) bool {
	return strings.HasPrefix(child, protectedPrefix+holderHash(holder))
}

// contender is one child of a lease's path that takes part in the lock.
type contender struct {
	name string
	seq  int64
}

// sequence parses the sequence of a lock node, as zk.Lock, Curator and
// Kazoo name them: the server's 10-digit sequence after the last "lock-"
// (zk.Lock, Curator) or "__lock__" (Kazoo). Other children (a nested
// lease's path) are not contenders.
func sequence(child string) (int64, bool) {
	var rest string
	if i := strings.LastIndex(child, lockMarker); i >= 0 {
		rest = child[i+len(lockMarker):]
	} else if j := strings.LastIndex(child, "__lock__"); j >= 0 {
		rest = child[j+len("__lock__"):]
	}
	if len(rest) != 10 {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil
}

// contenders returns the lock nodes among children, lowest sequence first:
// the first is the holder.
func contenders(children []string) []contender {
	var out []contender
	for _, c := range children {
		if seq, ok := sequence(c); ok {
			out = append(out, contender{c, seq})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// nodeData is the data of a leasehold contender node.
type nodeData struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Holder   string `json:"holder"`
	Metadata string `json:"metadata,omitempty"`
	TTLms    int64  `json:"ttl_ms"`
}

func encodeNode(holder, metadata string, ttl time.Duration) []byte {
	b, _ := json.Marshal(nodeData{Holder: holder, Metadata: metadata, TTLms: ttl.Milliseconds()})
	return b
}

// decodeNode reads a contender node's data; ok is false for a node that is
// not leasehold's.
func decodeNode(b []byte) (nodeData, bool) {
	var d nodeData
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &d) != nil || d.Holder == "" {
		return nodeData{}, false
	}
	return d, true
}

// pathRecord is the data leasehold writes on a lease's path node, in the
// same transaction as each contender node it creates: the path node's mzxid
// is then that node's czxid, the token of the last term leasehold created
// there, which Get reports once no term is live.
type pathRecord struct {
	_ [0]func() // not comparable: spares the binary an equality function

	Leasehold int    `json:"leasehold"`
	Node      string `json:"node"`
}

func encodeRecord(node string) []byte {
	b, _ := json.Marshal(pathRecord{Leasehold: 1, Node: node})
	return b
}

func isRecord(b []byte) bool {
	var r pathRecord
	return len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &r) == nil && r.Leasehold == 1
}

// foreignHolder names a holder that is not a leasehold client (zk.Lock,
// Curator): "zookeeper:" and its node's name. It passes
// store.ValidateHolder: node names are printable and short.
func foreignHolder(node string) string {
	h := "zookeeper:" + node
	if store.ValidateHolder(h) != nil {
		return "zookeeper:foreign"
	}
	return h
}

// foreignMetadata is a foreign node's data, if it is printable, cut to the
// metadata limit.
func foreignMetadata(b []byte) string {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return ""
		}
	}
	if len(b) > store.MaxMetadataLen {
		b = b[:store.MaxMetadataLen]
	}
	return string(b)
}
