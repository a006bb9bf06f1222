package bench

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"
)

func TestFormatKey(t *testing.T) {
	for _, c := range []struct {
		i    uint64
		size int
		want string
	}{{0, 8, "k0000000"}, {123, 6, "k00123"}, {999999, 7, "k999999"}} {
		if got := string(FormatKey(nil, c.i, c.size)); got != c.want {
			t.Errorf("FormatKey(%d, %d) = %q, want %q", c.i, c.size, got, c.want)
		}
	}
	if minKeySize(1_000_000) != 7 || minKeySize(1) != 2 {
		t.Errorf("minKeySize: %d %d", minKeySize(1_000_000), minKeySize(1))
	}
}

func TestParseRange(t *testing.T) {
	good := map[string]Range{"1024": {1024, 1024}, "100-1900": {100, 1900}, "3-10": {3, 10}, "5-5": {5, 5}}
	for s, want := range good {
		if got, err := ParseRange(s); err != nil || got != want {
			t.Errorf("ParseRange(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "x", "10-3", "3-", "-", "1-2-3"} {
		if _, err := ParseRange(s); err == nil {
			t.Errorf("ParseRange(%q) accepted", s)
		}
	}
}

// Every distribution stays in range and is a function of the random stream.
func TestKeyDistsInRangeAndDeterministic(t *testing.T) {
	for _, name := range []string{Uniform, Zipfian, Latest, Hotspot} {
		for _, n := range []uint64{1, 2, 3, 1000} {
			d, err := NewKeyDist(name, n, HotspotSpec{0.2, 0.8})
			if err != nil {
				t.Fatal(err)
			}
			r1, r2 := rand.New(rand.NewPCG(7, 1)), rand.New(rand.NewPCG(7, 1))
			for i := range 2000 {
				a, b := d.Next(r1, uint64(i)), d.Next(r2, uint64(i))
				if a != b || a >= n {
					t.Fatalf("%s n=%d: draws %d and %d", name, n, a, b)
				}
			}
		}
	}
}

func counts(d KeyDist, n uint64, draws int, newest uint64) []int {
	c := make([]int, n)
	r := rand.New(rand.NewPCG(1, 2))
	for range draws {
		c[d.Next(r, newest)]++
	}
	return c
}

// Zipfian with theta 0.99: the most popular item gets 1/zeta(n) of the draws,
// the second 1/(2^0.99 zeta(n)); the scrambled version moves them elsewhere.
func TestZipfianShape(t *testing.T) {
	const n, draws = 1000, 200000
	z := newZipf(n, zipfTheta)
	r := rand.New(rand.NewPCG(3, 4))
	c := make([]int, n)
	for range draws {
		c[z.rank(r)]++
	}
	p0 := 1 / zeta(n, zipfTheta)
	if got := float64(c[0]) / draws; got < 0.9*p0 || got > 1.1*p0 {
		t.Errorf("rank 0 has %.4f of draws, want about %.4f", got, p0)
	}
	if !(c[0] > c[1] && c[1] > c[10] && c[10] > c[500]) {
		t.Errorf("not decreasing: %d %d %d %d", c[0], c[1], c[10], c[500])
	}
	sc := counts(scrambledZipfian{z}, n, draws, 0)
	if sc[0] > c[0]/2 && fnv64(0)%n != 0 {
		t.Errorf("scrambled zipfian still favours key 0: %d", sc[0])
	}
	maxc := 0
	for _, v := range sc {
		maxc = max(maxc, v)
	}
	if maxc < c[0]*9/10 {
		t.Errorf("scrambled zipfian's hottest key has %d draws, want about %d", maxc, c[0])
	}
}

func TestLatestFavoursNewest(t *testing.T) {
	d, _ := NewKeyDist(Latest, 1000, HotspotSpec{})
	c := counts(d, 1000, 100000, 500)
	if !(c[500] > c[499] && c[499] > c[400] && c[500] > c[501]*10) {
		t.Errorf("latest around 500: %d %d %d %d", c[501], c[500], c[499], c[400])
	}
}

func TestHotspot(t *testing.T) {
	d, _ := NewKeyDist(Hotspot, 1000, HotspotSpec{0.2, 0.8})
	c := counts(d, 1000, 100000, 0)
	hot := 0
	for _, v := range c[:200] {
		hot += v
	}
	if f := float64(hot) / 100000; f < 0.78 || f > 0.82 {
		t.Errorf("hot keys got %.3f of the operations, want 0.8", f)
	}
	if _, err := NewKeyDist(Hotspot, 10, HotspotSpec{1.2, 0.8}); err == nil {
		t.Error("hotspot fraction 1.2 accepted")
	}
}

func TestValueRoundTrip(t *testing.T) {
	f := func(keyN uint32, version uint64, size uint16) bool {
		key := FormatKey(nil, uint64(keyN), 16)
		v := EncodeValue(nil, key, version, int(size))
		if len(v) != max(int(size), MinValueSize(16)) {
			return false
		}
		got, integ := Verify(key, v)
		return got == version && integ == Intact
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

// Any single flipped byte is caught, and reported as the right kind of damage.
func TestVerifyTellsDamageApart(t *testing.T) {
	key := []byte("k000042")
	v := EncodeValue(nil, key, 7, 200)
	for i := range v {
		bad := bytes.Clone(v)
		bad[i] ^= 0x01
		if _, integ := Verify(key, bad); integ == Intact {
			t.Fatalf("flip at %d not detected", i)
		}
	}
	other := EncodeValue(nil, []byte("k000043"), 7, 200)
	cases := []struct {
		name  string
		value []byte
		want  Integrity
	}{
		{"intact", v, Intact},
		{"another key's value", other, WrongKey},
		{"padding changed", append(bytes.Clone(v[:150]), strings.Repeat("x", 50)...), Corrupt},
		{"truncated", v[:20], Malformed},
		{"foreign", []byte(strings.Repeat("z", 100)), Malformed},
		{"empty", nil, Malformed},
	}
	for _, c := range cases {
		if _, got := Verify(key, c.value); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The model, step by step on one key. Ticks are explicit: the history is pure.
func TestHistory(t *testing.T) {
	val := func(v uint64) Answer { return Answer{Version: v} }
	missing := Answer{Missing: true}
	type step struct {
		do   string // "b" begin write, "bd" begin delete, "ok", "fail", "read"
		ver  uint64
		b, e uint64 // read interval; for writes b is the tick
		ans  Answer
		want bool
	}
	cases := []struct {
		name      string
		staleness int
		steps     []step
	}{
		{"before any write anything intact goes", 0, []step{
			{do: "read", b: 1, e: 2, ans: val(99), want: true},
			{do: "read", b: 1, e: 2, ans: missing, want: true},
		}},
		{"latest acknowledged write", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "b", ver: 2, b: 3}, {do: "ok", ver: 2, b: 4},
			{do: "read", b: 5, e: 6, ans: val(2), want: true},
			{do: "read", b: 5, e: 6, ans: val(1), want: false},
			{do: "read", b: 5, e: 6, ans: missing, want: false},
			{do: "read", b: 5, e: 6, ans: val(3), want: false},
		}},
		{"in flight at the read's start", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "b", ver: 2, b: 3},
			{do: "read", b: 4, e: 6, ans: val(2), want: true},
			{do: "read", b: 4, e: 6, ans: val(1), want: true},
		}},
		{"started during the read", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "b", ver: 2, b: 5}, {do: "ok", ver: 2, b: 6},
			{do: "read", b: 4, e: 7, ans: val(2), want: true},
			{do: "read", b: 4, e: 7, ans: val(1), want: true},
			{do: "read", b: 8, e: 9, ans: val(1), want: false},
		}},
		{"concurrent writes acknowledged in either order", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "b", ver: 2, b: 2},
			{do: "ok", ver: 2, b: 3}, {do: "ok", ver: 1, b: 4},
			{do: "read", b: 5, e: 6, ans: val(1), want: true},
			{do: "read", b: 5, e: 6, ans: val(2), want: true},
		}},
		{"missing after an acknowledged delete is correct", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "bd", ver: 2, b: 3}, {do: "ok", ver: 2, b: 4},
			{do: "read", b: 5, e: 6, ans: missing, want: true},
			{do: "read", b: 5, e: 6, ans: val(1), want: false},
			{do: "read", b: 5, e: 6, ans: Answer{Exists: true}, want: false},
		}},
		{"a failed write may or may not have happened", 0, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "b", ver: 2, b: 3}, {do: "fail", ver: 2, b: 4},
			{do: "read", b: 5, e: 6, ans: val(1), want: true},
			{do: "read", b: 5, e: 6, ans: val(2), want: true},
		}},
		{"staleness 1 accepts the previous write, not the one before", 1, []step{
			{do: "b", ver: 1, b: 1}, {do: "ok", ver: 1, b: 2},
			{do: "b", ver: 2, b: 3}, {do: "ok", ver: 2, b: 4},
			{do: "b", ver: 3, b: 5}, {do: "ok", ver: 3, b: 6},
			{do: "read", b: 7, e: 8, ans: val(3), want: true},
			{do: "read", b: 7, e: 8, ans: val(2), want: true},
			{do: "read", b: 7, e: 8, ans: val(1), want: false},
		}},
	}
	for _, c := range cases {
		h := newHistory()
		for i, s := range c.steps {
			switch s.do {
			case "b", "bd":
				h.begin(s.ver, s.do == "bd", s.b)
			case "ok", "fail":
				h.end(s.ver, s.do == "ok", s.b, 0, c.staleness)
			case "read":
				if got, why := h.possible(s.ans, s.b, s.e, c.staleness, 0); got != s.want {
					t.Errorf("%s: step %d: read %+v = %v (%s), want %v", c.name, i, s.ans, got, why, s.want)
				}
			}
		}
	}
}

// Property: with writes one after another (no concurrency) and a horizon
// that lets history go, exactly the last acknowledged write is readable, and
// the history stays small.
func TestHistorySequentialProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		h := newHistory()
		tick := uint64(1)
		var last uint64
		deleted := false
		for v := uint64(1); v <= 50; v++ {
			del := r.IntN(4) == 0
			h.begin(v, del, tick)
			h.end(v, true, tick+1, tick+1, 0)
			tick += 2
			last, deleted = v, del
			if len(h.writes) > 2 {
				t.Fatalf("trial %d: history holds %d writes", trial, len(h.writes))
			}
		}
		for v := uint64(1); v <= 50; v++ {
			ok, _ := h.possible(Answer{Version: v}, tick, tick+1, 0, 0)
			if ok != (v == last && !deleted) {
				t.Fatalf("trial %d: version %d readable=%v, last=%d deleted=%v", trial, v, ok, last, deleted)
			}
		}
		if ok, _ := h.possible(Answer{Missing: true}, tick, tick+1, 0, 0); ok != deleted {
			t.Fatalf("trial %d: missing readable=%v, deleted=%v", trial, ok, deleted)
		}
	}
}

func TestModelConcurrentUse(t *testing.T) {
	m := NewModel(0)
	done := make(chan bool)
	for w := range 4 {
		go func() {
			for i := range 1000 {
				key := uint64(i % 10)
				ver := uint64(w*1000 + i + 1)
				m.BeginWrite(key, ver, false)
				b := m.BeginRead()
				m.EndWrite(key, ver, true)
				if ok, why := m.Check(key, b, Answer{Version: ver}, 0); !ok {
					t.Errorf("own write %d of key %d not readable: %s", ver, key, why)
				}
			}
			done <- true
		}()
	}
	for range 4 {
		<-done
	}
}

func opsOf(cfg Config, iteration int) [][]Op { return opsN(cfg, iteration, 50) }

func opsN(cfg Config, iteration, batches int) [][]Op {
	p, err := makePlan(&cfg, 1)
	if err != nil {
		panic(err)
	}
	var all [][]Op
	for pi := range p.phases {
		for gi := range p.phases[pi].groups {
			g := &p.phases[pi].groups[gi]
			for w := range g.workers {
				gen := newGen(&cfg, g, iteration, pi, gi, w)
				var ops []Op
				for range batches {
					n := len(ops)
					ops = gen.Batch(ops)
					if len(ops) == n {
						break
					}
					ops = append(ops, Op{Task: -1}) // batch boundary
				}
				all = append(all, ops)
			}
		}
	}
	return all
}

// The same seed gives the same operations, batch boundaries included, for
// every job; another seed gives others.
func TestSameSeedSameOperations(t *testing.T) {
	for _, job := range Jobs() {
		cfg := DefaultConfig()
		cfg.Job, cfg.Keys, cfg.Workers, cfg.Readers, cfg.Writers = job, 1000, 3, 3, 2
		cfg.Pipeline, cfg.ValueSize = Range{3, 10}, Range{100, 1900}
		a, b := opsOf(cfg, 0), opsOf(cfg, 0)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed, different operations", job)
		}
		cfg.Seed = 2
		if reflect.DeepEqual(a, opsOf(cfg, 0)) {
			t.Errorf("%s: another seed, same operations", job)
		}
	}
}

func TestPlanSplitsRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Job, cfg.Keys, cfg.Requests, cfg.Duration, cfg.Readers, cfg.Writers = JobMixed, 1000, 1000, 0, 3, 2
	ops := opsN(cfg, 0, 1e6)
	n := map[Kind]int{}
	for _, w := range ops {
		for _, o := range w {
			if o.Task >= 0 {
				n[o.Kind]++
			}
		}
	}
	if n[Get] != 800 || n[Set] != 200 {
		t.Errorf("mixed 80:20 of 1000: %d GET, %d SET", n[Get], n[Set])
	}
	cfg.Job = JobCRUD
	seen := map[uint64]bool{}
	p, _ := makePlan(&cfg, 1)
	g := &p.phases[0].groups[0]
	for w := range g.workers {
		gen := newGen(&cfg, g, 0, 0, 0, w)
		for {
			b := gen.Batch(nil)
			if len(b) == 0 {
				break
			}
			for _, o := range b {
				seen[o.Key] = true
			}
		}
	}
	if len(seen) != 1000 {
		t.Errorf("crud PutCreate of 1000 requests over 1000 keys wrote %d distinct keys", len(seen))
	}
}

func TestYCSBMix(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Job, cfg.Keys, cfg.Requests, cfg.Duration, cfg.Workers = "ycsb-b", 1000, 20000, 0, 2
	n := map[Kind]int{}
	for _, w := range opsN(cfg, 0, 1e6) {
		for _, o := range w {
			if o.Task >= 0 {
				n[o.Kind]++
			}
		}
	}
	if f := float64(n[Get]) / 20000; f < 0.94 || f > 0.96 {
		t.Errorf("ycsb-b reads %.3f, want 0.95", f)
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cases := map[string]func(*Config){
		"unknown job":        func(c *Config) { c.Job = "nope" },
		"ycsb-e":             func(c *Config) { c.Job = "ycsb-e" },
		"key too short":      func(c *Config) { c.KeySize = 3 },
		"value too small":    func(c *Config) { c.ValueSize = Range{10, 10} },
		"pipeline 0":         func(c *Config) { c.Pipeline = Range{0, 0} },
		"duration and reqs":  func(c *Config) { c.Requests = 10 },
		"no end":             func(c *Config) { c.Duration = 0 },
		"no workers":         func(c *Config) { c.Readers, c.Writers = 0, 0 },
		"ratio vs writers":   func(c *Config) { c.Writers = 0 },
		"bad consistency":    func(c *Config) { c.Consistency = "ALL" },
		"bad distribution":   func(c *Config) { c.Distribution = "pareto" },
		"negative rate":      func(c *Config) { c.Rate = -1 },
		"zero iterations":    func(c *Config) { c.Iterations = 0 },
		"bad hotspot":        func(c *Config) { c.Distribution, c.Hotspot = Hotspot, HotspotSpec{0, 1} },
		"negative staleness": func(c *Config) { c.Staleness = -1 },
	}
	for name, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, ". ") || strings.Contains(msg, "\n") {
			t.Errorf("%s: not one sentence: %q", name, msg)
		}
	}
}

// The self-check names a task of an open loop whose tail is the wait for a
// free worker (response far above service), and no other.
func TestQueueCheck(t *testing.T) {
	open := &phasePlan{groups: []group{{rate: 1000}}}
	closed := &phasePlan{groups: []group{{}}}
	row := func(task string, response, service float64) Row {
		return Row{Task: task, Response: Latency{P99: response}, Service: Latency{P99: service}}
	}
	for _, tt := range []struct {
		name string
		ph   *phasePlan
		rows []Row
		want []string // tasks warned of
	}{
		{"a backlog of seconds", open, []Row{row("Get", 40, 25), row("Set", 1974, 29)}, []string{"Set"}},
		{"within the server's own tail", open, []Row{row("Set", 35, 29)}, nil},
		{"half again the server's tail", open, []Row{row("Set", 45, 30)}, nil},
		{"twice a fast service, by less than the floor", open, []Row{row("Get", 1.2, 0.4)}, nil},
		{"a closed loop has no queue of its own", closed, []Row{row("Set", 1974, 29)}, nil},
	} {
		got := queueCheck(tt.ph, tt.rows)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %q, want warnings of %v", tt.name, got, tt.want)
			continue
		}
		for i, task := range tt.want {
			if !strings.HasPrefix(got[i], task+": response time p99 ") || !strings.Contains(got[i], "free worker") {
				t.Errorf("%s: %q, want a warning of %s", tt.name, got[i], task)
			}
		}
	}
}
