package fit

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzReadSpans feeds arbitrary bytes to the two readers of exported spans,
// a whole file and a file tailed while services write it: a spans file is
// input from other processes, so they answer or fail with an error, and
// never crash.
func FuzzReadSpans(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.json")
	exp, closer, err := NewSpanExporter(context.Background(), "file:"+path)
	if err != nil {
		f.Fatal(err)
	}
	w := NewSpanWriter(exp)
	w.Write(context.Background(), &Call{Service: "api", OK: true, Start: time.Unix(1, 0), Duration: time.Millisecond,
		Calls: []*Call{{Point: "api->ratings", Error: "injected", Injected: "error", Start: time.Unix(1, 100)}}})
	w.Close(context.Background())
	closer.Close()
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("{}\n{\"SpanContext\":{\"TraceID\":\"a\"}}\n"))
	f.Add([]byte(`{"Attributes":[{"Key":"troop.ok","Value":{"Type":"BOOL","Value":"x"}}]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadSpans(bytes.NewReader(b))
		p := filepath.Join(dir, "tail.json")
		os.Remove(p)
		tail, err := NewSpanTail(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tail.Lineage(context.Background(), "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", 0)
	})
}

// FuzzDecodeLineage feeds arbitrary lineage headers, which come from the
// callee: a header is decoded or refused with an error, and what decodes
// encodes back to the same tree.
func FuzzDecodeLineage(f *testing.F) {
	f.Add(EncodeLineage(&Call{Service: "api", OK: true, Calls: []*Call{{Point: "api->ratings", Injected: Error}}}))
	f.Add("e30")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set(LineageHeader, v)
		c, err := DecodeLineage(h)
		if err != nil || c == nil {
			return
		}
		h.Set(LineageHeader, EncodeLineage(c))
		again, err := DecodeLineage(h)
		if err != nil {
			t.Fatalf("a decoded lineage does not decode again: %v", err)
		}
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(again)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the tree:\n%s\n%s", a, b)
		}
	})
}

// FuzzDecodeOTLP feeds arbitrary bodies to the OTLP receiver's decoder, as
// protobuf and as JSON: a body from the network is decoded or refused with
// an error, and never crashes the receiver.
func FuzzDecodeOTLP(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte("\x0a\x02\x12\x00"), false)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"AAECAwQFBgcICQoLDA0ODw==","spanId":"AAECAwQFBgc=","name":"api","attributes":[{"key":"troop.service","value":{"stringValue":"api"}},{"key":"troop.ok","value":{"boolValue":true}}]}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, json bool) {
		ct := "application/x-protobuf"
		if json {
			ct = "application/json"
		}
		spans, err := decodeOTLP(body, ct)
		if err != nil {
			return
		}
		var s spanStore
		for _, e := range spans {
			s.add(e)
			s.find(e.traceID, e.parent)
		}
	})
}
