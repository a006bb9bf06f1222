package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
)

// TestPubSubAcrossNodes publishes through one node of a 3-rack cluster
// to subscribers on the others: each gets the message once, in RESP2 and
// RESP3 forms, and PUBSUB counts the datacenter's subscribers.
func TestPubSubAcrossNodes(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	pub := tc.client(0, "")
	sub2 := tc.client(1, "") // RESP2, SUBSCRIBE
	sub3 := tc.client(2, "") // RESP3, PSUBSCRIBE
	if v := sub3.do("HELLO", "3"); v.IsError() {
		t.Fatal(v.Str)
	}
	read := func(c *client) resp.Value {
		t.Helper()
		c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		v, err := c.rd.ReadValue()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	words := func(v resp.Value) string {
		var out []string
		for _, e := range v.Elems {
			if e.Type == resp.Integer {
				out = append(out, fmt.Sprint(e.Int))
			} else {
				out = append(out, string(e.Str))
			}
		}
		return strings.Join(out, " ")
	}

	sub2.c.Write(resp.AppendCommandStrings(nil, "SUBSCRIBE", "jobs", "other"))
	if got := words(read(sub2)) + "; " + words(read(sub2)); got != "subscribe jobs 1; subscribe other 2" {
		t.Fatalf("SUBSCRIBE answered %q", got)
	}
	sub3.c.Write(resp.AppendCommandStrings(nil, "PSUBSCRIBE", "jo*"))
	if v := read(sub3); words(v) != "psubscribe jo* 1" {
		t.Fatalf("PSUBSCRIBE answered %q", words(v))
	}
	if got := sub2.do("GET", "k"); !got.IsError() || !strings.Contains(string(got.Str), "only (P|S)SUBSCRIBE") {
		t.Fatalf("GET on a RESP2 subscriber = %s, want Redis's refusal", got)
	}
	if got := words(pub.do("PUBSUB", "NUMSUB", "jobs", "none")); got != "jobs 1 none 0" {
		t.Fatalf("PUBSUB NUMSUB through another node = %q", got)
	}
	if got := pub.do("PUBSUB", "NUMPAT"); got.Int != 1 {
		t.Fatalf("PUBSUB NUMPAT = %s", got)
	}
	if got := words(pub.do("PUBSUB", "CHANNELS", "j*")); got != "jobs" {
		t.Fatalf("PUBSUB CHANNELS j* = %q", got)
	}

	if got := pub.do("PUBLISH", "jobs", "hello"); got.Int != 2 {
		t.Fatalf("PUBLISH = %s, want 2 receivers (one per node)", got)
	}
	if got := words(read(sub2)); got != "message jobs hello" {
		t.Fatalf("the RESP2 subscriber got %q", got)
	}
	v := read(sub3)
	if got := words(v); got != "pmessage jo* jobs hello" {
		t.Fatalf("the RESP3 subscriber got %q", got)
	}
	// Once each: a PING's answer comes next, not the message again.
	sub2.c.Write(resp.AppendCommandStrings(nil, "PING"))
	if got := words(read(sub2)); got != "pong " {
		t.Fatalf("after the message the RESP2 subscriber got %q, want PING's pong", got)
	}
	if got := sub3.do("PING"); string(got.Str) != "PONG" {
		t.Fatalf("after the message the RESP3 subscriber got %s, want PONG", got)
	}

	// Shard channels are their own.
	sub2.c.Write(resp.AppendCommandStrings(nil, "SSUBSCRIBE", "jobs"))
	if got := words(read(sub2)); got != "ssubscribe jobs 1" {
		t.Fatalf("SSUBSCRIBE answered %q", got)
	}
	if got := pub.do("SPUBLISH", "jobs", "s1"); got.Int != 1 {
		t.Fatalf("SPUBLISH = %s, want 1", got)
	}
	if got := words(read(sub2)); got != "smessage jobs s1" {
		t.Fatalf("the shard subscriber got %q", got)
	}

	sub2.c.Write(resp.AppendCommandStrings(nil, "UNSUBSCRIBE"))
	if got := words(read(sub2)) + "; " + words(read(sub2)); got != "unsubscribe jobs 1; unsubscribe other 0" {
		t.Fatalf("UNSUBSCRIBE answered %q", got)
	}
	sub2.c.Write(resp.AppendCommandStrings(nil, "SUNSUBSCRIBE"))
	read(sub2)
	if got := sub2.do("GET", "k"); got.IsError() {
		t.Fatalf("GET after unsubscribing from all = %s", got)
	}

	// A node gone: its subscribers miss the message, the others get it.
	tc.nodes[2].stop()
	if got := pub.do("PUBLISH", "jobs", "after"); got.IsError() || got.Int != 0 {
		t.Fatalf("PUBLISH with the pattern subscriber's node stopped = %s, want 0", got)
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"jo*", "jobs", true}, {"jo*", "j", false}, {"j?bs", "jobs", true},
		{"h[ae]llo", "hallo", true}, {"h[^e]llo", "hello", false}, {"h[a-b]llo", "hbllo", true},
		{`h\*llo`, "h*llo", true}, {`h\*llo`, "hello", false}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false},
	} {
		if got := globMatch([]byte(tt.pattern), []byte(tt.s)); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func FuzzGlobMatch(f *testing.F) {
	f.Add([]byte("h[^a-]*\\"), []byte("hello"))
	f.Fuzz(func(t *testing.T, pattern, s []byte) {
		if len(pattern) > 64 || len(s) > 64 {
			return // the match backtracks on *, as Redis's does
		}
		globMatch(pattern, s)
	})
}
