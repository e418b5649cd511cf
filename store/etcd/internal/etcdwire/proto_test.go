package etcdwire

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// These tests check the hand-written encoding against etcd's generated code
// (linked by the tests only): what etcdwire writes, etcd's types read as
// meant, and what etcd's types write, etcdwire reads.

func TestEncodeTxnReadByEtcd(t *testing.T) {
	get := etcdapi.GetPrefix("p/")
	get.SortByCreate = true
	get.MinCreate, get.MaxCreate = 7, 9
	req, err := encodeTxn(
		[]etcdapi.Cmp{
			etcdapi.CreateRevisionIs("p/a", 0),
			etcdapi.ValueIs("p/a", ""),
			etcdapi.LeaseIs("p/a", 0x1234),
			etcdapi.NoKeyIn("p/", "p0"),
			etcdapi.NoneCreatedBefore("p/", "p0", 42),
		},
		[]etcdapi.Op{etcdapi.Delete("p/a", true), etcdapi.Put("p/b", "holder", 0x99)},
		[]etcdapi.Op{get, etcdapi.Get("r")},
	)
	if err != nil {
		t.Fatal(err)
	}
	var got pb.TxnRequest
	if err := proto.Unmarshal(req, &got); err != nil {
		t.Fatalf("etcd cannot read the transaction: %v", err)
	}
	want := pb.TxnRequest{
		Compare: []*pb.Compare{
			{Target: pb.Compare_CREATE, Key: []byte("p/a"), TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}},
			{Target: pb.Compare_VALUE, Key: []byte("p/a"), TargetUnion: &pb.Compare_Value{Value: []byte{}}},
			{Target: pb.Compare_LEASE, Key: []byte("p/a"), TargetUnion: &pb.Compare_Lease{Lease: 0x1234}},
			{Target: pb.Compare_CREATE, Key: []byte("p/"), RangeEnd: []byte("p0"), TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 0}},
			{Result: pb.Compare_GREATER, Target: pb.Compare_CREATE, Key: []byte("p/"), RangeEnd: []byte("p0"), TargetUnion: &pb.Compare_CreateRevision{CreateRevision: 41}},
		},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("p/a"), PrevKv: true}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("p/b"), Value: []byte("holder"), Lease: 0x99}}},
		},
		Failure: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"),
				SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, MinCreateRevision: 7, MaxCreateRevision: 9}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("r")}}},
		},
	}
	if !proto.Equal(&want, &got) {
		t.Errorf("etcd read\n%v\nwant\n%v", &got, &want)
	}
	// The negative control: a comparison of another target reads differently.
	bad, _ := encodeTxn([]etcdapi.Cmp{{Key: "p/a", Target: etcdapi.TargetMod}}, nil, nil)
	var badGot pb.TxnRequest
	if err := proto.Unmarshal(bad, &badGot); err != nil || badGot.Compare[0].Target == pb.Compare_CREATE {
		t.Errorf("a mod-revision comparison read as %v (%v)", badGot.Compare, err)
	}
	// The value comparison with an empty value is written (a oneof member
	// at its zero value is still set).
	if _, ok := got.Compare[1].TargetUnion.(*pb.Compare_Value); !ok {
		t.Errorf("the empty value comparison lost its target: %v", got.Compare[1])
	}
}

func TestDecodeWrittenByEtcd(t *testing.T) {
	kv := &mvccpb.KeyValue{Key: []byte("p/a"), Value: []byte("v"), CreateRevision: 5, ModRevision: 6, Version: 2, Lease: 0x77}
	resp := &pb.TxnResponse{
		Header:    &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 42, RaftTerm: 3},
		Succeeded: true,
		Responses: []*pb.ResponseOp{
			{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv, kv}, Count: 2}}},
			{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{Deleted: 1, PrevKvs: []*mvccpb.KeyValue{kv}}}},
			{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}},
		},
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTxn(b)
	if err != nil {
		t.Fatal(err)
	}
	want := etcdapi.KeyValue{Key: []byte("p/a"), Value: []byte("v"), CreateRevision: 5, ModRevision: 6, Version: 2, Lease: 0x77}
	if got.Revision != 42 || !got.Succeeded || len(got.Responses) != 3 ||
		len(got.Responses[0].Kvs) != 2 || got.Responses[0].Count != 2 || len(got.Responses[1].PrevKvs) != 1 {
		t.Fatalf("decoded %+v", got)
	}
	for _, g := range []etcdapi.KeyValue{got.Responses[0].Kvs[0], got.Responses[1].PrevKvs[0]} {
		if string(g.Key) != string(want.Key) || string(g.Value) != string(want.Value) || g.CreateRevision != 5 ||
			g.ModRevision != 6 || g.Version != 2 || g.Lease != 0x77 {
			t.Errorf("key-value %+v, want %+v", g, want)
		}
	}

	lg, _ := proto.Marshal(&pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: 3}, ID: 0x55, TTL: 7})
	v, msg, err := decodeInts(lg, 4)
	if err != nil || v[2] != 0x55 || v[3] != 7 || msg != "" {
		t.Errorf("grant: %v %q %v", v, msg, err)
	}
	tl, _ := proto.Marshal(&pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: 3}, ID: 0x55, TTL: -1, GrantedTTL: 9})
	if v, _, err := decodeInts(tl, 0); err != nil || v[3] != -1 || v[4] != 9 {
		t.Errorf("time to live: %v %v", v, err)
	}
	wr, _ := proto.Marshal(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 3}, WatchId: 1, Created: true,
		Events: []*mvccpb.Event{{Type: mvccpb.DELETE, Kv: kv}}})
	w, err := decodeWatch(wr)
	if err != nil || !w.created || w.canceled || w.revision != 3 || len(w.events) != 1 {
		t.Errorf("watch: %+v, err %v", w, err)
	} else if ev := w.events[0]; string(ev.Key) != "p/a" || !ev.Delete || ev.Revision != kv.ModRevision {
		t.Errorf("watch event %+v; want a delete of p/a at revision %d", ev, kv.ModRevision)
	}
	put, _ := proto.Marshal(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 4}, Events: []*mvccpb.Event{{Type: mvccpb.PUT, Kv: kv}}})
	if w, err := decodeWatch(put); err != nil || len(w.events) != 1 || w.events[0].Delete {
		t.Errorf("watch of a put: %+v, err %v; want one event, not a delete", w, err)
	}
	// The negative control: a truncated message is an error, not a guess.
	if _, err := decodeTxn(b[:len(b)-3]); err == nil {
		t.Error("a truncated transaction response decoded without error")
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a/": "a0", "a\xff": "b", "\xff\xff": "\x00", "": "\x00"} {
		if got := etcdapi.PrefixEnd(in); got != want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}
