package kubernetes

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestEncodeKeepsUnknownFields: a write sends back the object as read with
// only the store's fields changed, fields this package does not know
// included (a field added to Lease later, finalizers). The negative control
// encodes a lease made afresh, which has none of them.
func TestEncodeKeepsUnknownFields(t *testing.T) {
	read := `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
	 "metadata":{"name":"job","namespace":"ns","resourceVersion":"7","finalizers":["example.com/f"],
	   "labels":{"a":"b"},"annotations":{"example.com/x":"y","leasehold.dev/metadata":"old"}},
	 "spec":{"holderIdentity":"a","leaseTransitions":3,"strategy":"OldestEmulationVersion",
	   "preferredHolder":"b","futureField":{"n":1}}}`
	var l lease
	if err := json.Unmarshal([]byte(read), &l); err != nil {
		t.Fatal(err)
	}
	next := l.clone()
	o := object{name: "job", obj: "job", verbatim: true}
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	setSpec(next, "b", 2, at, at, 4)
	o.setAnnotations(next, 4, "")
	if l.Metadata.Annotations["leasehold.dev/metadata"] != "old" {
		t.Fatal("clone shares the annotations with the lease read")
	}
	b, err := next.encode()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	meta, spec := got["metadata"].(map[string]any), got["spec"].(map[string]any)
	want := map[string]any{
		"holderIdentity": "b", "leaseDurationSeconds": 2.0, "leaseTransitions": 4.0,
		"acquireTime": "2026-01-02T03:04:05.123456Z", "renewTime": "2026-01-02T03:04:05.123456Z",
		"strategy": "OldestEmulationVersion", "preferredHolder": "b", "futureField": map[string]any{"n": 1.0},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("spec written = %v\nwant %v", spec, want)
	}
	if !reflect.DeepEqual(meta["finalizers"], []any{"example.com/f"}) || meta["resourceVersion"] != "7" ||
		!reflect.DeepEqual(meta["annotations"], map[string]any{"example.com/x": "y"}) ||
		!reflect.DeepEqual(meta["labels"], map[string]any{"a": "b"}) {
		t.Errorf("metadata written = %v", meta)
	}

	// Negative control: the same fields on a lease made afresh lose them.
	fresh := new(lease)
	fresh.Metadata.Name = "job"
	setSpec(fresh, "b", 2, at, at, 4)
	b, _ = fresh.encode()
	var f map[string]any
	json.Unmarshal(b, &f)
	if _, ok := f["spec"].(map[string]any)["futureField"]; ok {
		t.Error("negative control: a fresh lease has futureField; the check above proves nothing")
	}
}
