package bench

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/resp"
)

// redisDo sends one command to addr and returns the raw reply.
func redisDo(t *testing.T, addr string, args ...string) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		t.Fatal(err)
	}
	raw, err := resp.NewReader(c, resp.DefaultLimits).ReadRaw(nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestAuditFindsLostAndCorruptWrites(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobWrite)
	cfg.Keys, cfg.Requests = 200, 1000
	tg := respTarget(t, srv.Addr, 2)
	m := NewModel(0)
	if _, err := RunModel(context.Background(), cfg, tg, nil, m); err != nil {
		t.Fatal(err)
	}
	a, err := Audit(context.Background(), tg, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	written := m.Written()
	if a.Keys != int64(len(written)) || a.Keys < 150 || !a.OK() {
		t.Fatalf("clean store: %+v (wrote %d keys)", a, len(written))
	}

	// Behind the benchmark's back: drop one acknowledged write, replace
	// another with a value of a different key, and make a third unreadable.
	k0 := string(cfg.Key(nil, written[0]))
	k1 := string(cfg.Key(nil, written[1]))
	k2 := string(cfg.Key(nil, written[2]))
	redisDo(t, srv.Addr, "DEL", k0)
	redisDo(t, srv.Addr, "SET", k1, string(EncodeValue(nil, []byte(k2), 7, 200)))
	redisDo(t, srv.Addr, "LPUSH", k2+"x", "a") // unrelated key: must not count
	a, err = Audit(context.Background(), tg, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Lost != 1 || a.Corrupt != 1 || a.Errors != 0 || a.OK() {
		t.Fatalf("want 1 lost and 1 corrupt, got %+v", a)
	}
	if !strings.Contains(strings.Join(a.Samples, "\n"), k0) {
		t.Errorf("samples do not name the lost key %s: %v", k0, a.Samples)
	}

	// A server that is gone is an error per key, not a loss.
	srv.Kill()
	a, err = Audit(context.Background(), tg, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Errors != a.Keys || a.Lost != 0 {
		t.Fatalf("dead server: %+v", a)
	}
}

// Keys written by several writers at once: the audit holds each key to
// its latest acknowledged write, whoever wrote it. A store that kept an
// earlier write over a later acknowledged one (an overtaken write, as when
// two coordinators order writes by clocks that disagree) loses the later
// write, and the audit says so for every key where it happened.
func TestAuditFindsOvertakenWrites(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobWrite)
	cfg.Keys, cfg.Requests, cfg.Workers, cfg.Pipeline = 5, 400, 8, Range{1, 1}
	tg := respTarget(t, srv.Addr, 4)
	m := NewModel(0)
	if _, err := RunModel(context.Background(), cfg, tg, nil, m); err != nil {
		t.Fatal(err)
	}
	earlier := map[string][]byte{}
	for _, k := range m.Written() {
		name := string(cfg.Key(nil, k))
		earlier[name] = redisDo(t, srv.Addr, "GET", name)
	}
	cfg.Seed++ // other writes, by every writer again
	if _, err := RunModel(context.Background(), cfg, tg, nil, m); err != nil {
		t.Fatal(err)
	}
	if a, err := Audit(context.Background(), tg, m, cfg); err != nil || !a.OK() || a.Keys != 5 {
		t.Fatalf("before the store turned back: %+v, %v", a, err)
	}
	for name, raw := range earlier {
		v, err := resp.Parse(raw)
		if err != nil || v.IsNull {
			t.Fatalf("GET %s = %q", name, raw)
		}
		redisDo(t, srv.Addr, "SET", name, string(v.Str))
	}
	a, err := Audit(context.Background(), tg, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Lost != 5 || a.Corrupt != 0 || a.Errors != 0 {
		t.Fatalf("want the 5 overtaken keys lost, got %+v", a)
	}
}

// With a key prefix, every key the run writes carries it, the checks of
// reads find their values under it, and so does the audit; no key without
// it is written.
func TestKeyPrefix(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobMixed)
	cfg.KeyPrefix, cfg.Keys, cfg.Requests = "run7:", 50, 400
	tg := respTarget(t, srv.Addr, 2)
	m := NewModel(0)
	res, err := RunModel(context.Background(), cfg, tg, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Totals {
		if r.Errors != 0 || r.Fails != 0 {
			t.Fatalf("%s: %d errors, %d fails (%v %v)", r.Task, r.Errors, r.Fails, r.ErrorSamples, r.FailSamples)
		}
	}
	all := string(redisDo(t, srv.Addr, "KEYS", "*"))
	if !strings.Contains(all, "run7:k") || strings.Contains(all, "\r\nk") {
		t.Fatalf("keys %q, want only run7:k...", all)
	}
	if a, err := Audit(context.Background(), tg, m, cfg); err != nil || !a.OK() || a.Keys == 0 {
		t.Fatalf("audit %+v, %v", a, err)
	}
	cfg.KeyPrefix = strings.Repeat("x", 257)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--key-prefix") {
		t.Errorf("a 257-byte prefix: %v", err)
	}
}
