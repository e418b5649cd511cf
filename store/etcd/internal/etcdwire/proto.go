package etcdwire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// This file encodes the requests and decodes the answers of etcd's v3 API by
// hand, with the field numbers of etcd's api/etcdserverpb/rpc.proto and
// api/mvccpb/kv.proto. proto3 omits fields at their zero value, except the
// members of a oneof, which are always written.

func appendBytesField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendIntField(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendIntField(b, num, 1)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// encodeRange is a RangeRequest.
func encodeRange(op etcdapi.Op) []byte {
	var b []byte
	b = appendBytesField(b, 1, op.Key)
	b = appendBytesField(b, 2, op.End)
	if op.SortByCreate {
		b = appendIntField(b, 5, 1) // ASCEND
		b = appendIntField(b, 6, 2) // CREATE
	} // else by key, ascending: etcd's order when none is asked for
	b = appendBoolField(b, 8, op.KeysOnly)
	b = appendBoolField(b, 9, op.CountOnly)
	b = appendIntField(b, 12, op.MinCreate)
	b = appendIntField(b, 13, op.MaxCreate)
	return b
}

// encodePut is a PutRequest.
func encodePut(op etcdapi.Op) []byte {
	var b []byte
	b = appendBytesField(b, 1, op.Key)
	b = appendBytesField(b, 2, op.Value)
	b = appendIntField(b, 3, int64(op.Lease))
	return b
}

// encodeDelete is a DeleteRangeRequest.
func encodeDelete(op etcdapi.Op) []byte {
	var b []byte
	b = appendBytesField(b, 1, op.Key)
	b = appendBytesField(b, 2, op.End)
	b = appendBoolField(b, 3, op.PrevKV)
	return b
}

// encodeRequestOp is a RequestOp.
func encodeRequestOp(op etcdapi.Op) ([]byte, error) {
	switch op.Kind {
	case etcdapi.OpRange:
		return appendMessage(nil, 1, encodeRange(op)), nil
	case etcdapi.OpPut:
		return appendMessage(nil, 2, encodePut(op)), nil
	case etcdapi.OpDelete:
		return appendMessage(nil, 3, encodeDelete(op)), nil
	}
	return nil, fmt.Errorf("etcdwire: unknown operation kind %d", op.Kind)
}

// encodeCompare is a Compare.
func encodeCompare(c etcdapi.Cmp) []byte {
	var b []byte
	b = appendIntField(b, 1, int64(c.Relation))
	b = appendIntField(b, 2, int64(c.Target))
	b = appendBytesField(b, 3, c.Key)
	var num protowire.Number
	switch c.Target {
	case etcdapi.TargetVersion:
		num = 4
	case etcdapi.TargetCreate:
		num = 5
	case etcdapi.TargetMod:
		num = 6
	case etcdapi.TargetValue:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendString(b, c.Value)
	case etcdapi.TargetLease:
		num = 8
	}
	if num != 0 {
		b = protowire.AppendTag(b, num, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(c.Int))
	}
	b = appendBytesField(b, 64, c.RangeEnd)
	return b
}

// encodeTxn is a TxnRequest.
func encodeTxn(cmps []etcdapi.Cmp, then, els []etcdapi.Op) ([]byte, error) {
	var b []byte
	for _, c := range cmps {
		b = appendMessage(b, 1, encodeCompare(c))
	}
	for i, ops := range [][]etcdapi.Op{then, els} {
		for _, op := range ops {
			m, err := encodeRequestOp(op)
			if err != nil {
				return nil, err
			}
			b = appendMessage(b, protowire.Number(2+i), m)
		}
	}
	return b, nil
}

// errMalformed: an answer that does not parse.
var errMalformed = errors.New("etcdwire: malformed protobuf message from etcd")

// fields calls f for each field of message b, with the varint value or the
// bytes of a length-delimited field; other wire types are skipped.
func fields(b []byte, f func(num protowire.Number, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
			if err := f(num, v, nil); err != nil {
				return err
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
			if err := f(num, 0, v); err != nil {
				return err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
		}
	}
	return nil
}

// headerRevision reads the revision of a ResponseHeader.
func headerRevision(b []byte) (int64, error) {
	var rev int64
	err := fields(b, func(num protowire.Number, v uint64, _ []byte) error {
		if num == 3 {
			rev = int64(v)
		}
		return nil
	})
	return rev, err
}

// decodeKV reads an mvccpb.KeyValue.
func decodeKV(b []byte) (etcdapi.KeyValue, error) {
	var kv etcdapi.KeyValue
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		switch num {
		case 1:
			kv.Key = append([]byte{}, bs...)
		case 2:
			kv.CreateRevision = int64(v)
		case 3:
			kv.ModRevision = int64(v)
		case 4:
			kv.Version = int64(v)
		case 5:
			kv.Value = append([]byte{}, bs...)
		case 6:
			kv.Lease = int64(v)
		}
		return nil
	})
	return kv, err
}

// decodeRange reads a RangeResponse.
func decodeRange(b []byte) (etcdapi.OpResponse, error) {
	var r etcdapi.OpResponse
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		switch num {
		case 2:
			kv, err := decodeKV(bs)
			if err != nil {
				return err
			}
			r.Kvs = append(r.Kvs, kv)
		case 4:
			r.Count = int64(v)
		}
		return nil
	})
	return r, err
}

// decodeDelete reads a DeleteRangeResponse.
func decodeDelete(b []byte) (etcdapi.OpResponse, error) {
	var r etcdapi.OpResponse
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		if num == 3 {
			kv, err := decodeKV(bs)
			if err != nil {
				return err
			}
			r.PrevKvs = append(r.PrevKvs, kv)
		}
		return nil
	})
	return r, err
}

// decodeTxn reads a TxnResponse.
func decodeTxn(b []byte) (*etcdapi.TxnResponse, error) {
	r := &etcdapi.TxnResponse{}
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		switch num {
		case 1:
			rev, err := headerRevision(bs)
			r.Revision = rev
			return err
		case 2:
			r.Succeeded = v != 0
		case 3:
			var op etcdapi.OpResponse
			err := fields(bs, func(num protowire.Number, _ uint64, m []byte) error {
				var err error
				switch num {
				case 1:
					op, err = decodeRange(m)
				case 3:
					op, err = decodeDelete(m)
				}
				return err
			})
			if err != nil {
				return err
			}
			r.Responses = append(r.Responses, op)
		}
		return nil
	})
	return r, err
}

// decodeInts reads the varint fields of a message (LeaseGrantResponse,
// LeaseTimeToLiveResponse, LeaseKeepAliveResponse) by number, and its string
// field errField (0: none).
func decodeInts(b []byte, errField protowire.Number) (map[protowire.Number]int64, string, error) {
	out := map[protowire.Number]int64{}
	var s string
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		if bs != nil || v != 0 {
			if num == errField && errField != 0 {
				s = string(bs)
			} else if bs == nil {
				out[num] = int64(v)
			}
		}
		return nil
	})
	return out, s, err
}

// watchResponse is a decoded WatchResponse.
type watchResponse struct {
	revision          int64 // its header's
	created, canceled bool
	compactRev        int64
	reason            string
	events            []etcdapi.Event
}

// decodeWatch reads a WatchResponse.
func decodeWatch(b []byte) (watchResponse, error) {
	var w watchResponse
	err := fields(b, func(num protowire.Number, v uint64, bs []byte) error {
		switch num {
		case 1:
			rev, err := headerRevision(bs)
			w.revision = rev
			return err
		case 3:
			w.created = v != 0
		case 4:
			w.canceled = v != 0
		case 5:
			w.compactRev = int64(v)
		case 6:
			w.reason = string(bs)
		case 11: // mvccpb.Event: type = 1 (PUT 0, DELETE 1), kv = 2
			var ev etcdapi.Event
			err := fields(bs, func(num protowire.Number, v uint64, m []byte) error {
				switch num {
				case 1:
					ev.Delete = v == 1
				case 2:
					kv, err := decodeKV(m)
					if err != nil {
						return err
					}
					ev.Key, ev.Revision = kv.Key, kv.ModRevision
				}
				return nil
			})
			w.events = append(w.events, ev)
			return err
		}
		return nil
	})
	return w, err
}
