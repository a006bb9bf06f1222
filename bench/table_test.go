package bench

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixedStats builds task stats from a closed form, so the table is the same
// on every machine.
func fixedStats(base time.Duration, n int, errs, fails int) *taskStats {
	s := newTaskStats()
	for i := range n {
		d := base + time.Duration(i%100)*base/20
		if i == n-1 {
			d = 40 * base // one outlier: Max far above the 99.9th percentile
		}
		o := OK
		switch {
		case i < errs:
			o = Error
		case i < errs+fails:
			o = Fail
		}
		s.record(d, d, o, "sample "+o.String(), 1)
	}
	return s
}

func fixedResult() *Result {
	res := &Result{Seed: 42, Config: DefaultConfig(), Target: "resp 127.0.0.1:6379, 1 links per address"}
	tasks := []struct {
		name string
		base time.Duration
		secs float64
	}{{"PutCreate", 300 * time.Microsecond, 2}, {"Get", 150 * time.Microsecond, 1}, {"PutUpdate", 2 * time.Millisecond, 4}, {"Delete", 20 * time.Millisecond, 3}}
	for ti, task := range tasks {
		tot := newTaskStats()
		var secs float64
		for it := 1; it <= 2; it++ {
			s := fixedStats(task.base*time.Duration(it), 1000*it, ti%2*it, (ti/2)*3*it)
			res.Rows = append(res.Rows, newRow(task.name, task.name, it, task.secs*float64(it), s, nil))
			tot.merge(s)
			secs += task.secs * float64(it)
		}
		res.Totals = append(res.Totals, newRow(task.name, task.name, 0, secs, tot, nil))
	}
	res.Warnings = []string{"the client used 95% of this machine's 2 cores: troop bench itself may have set the pace, not the server"}
	return res
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./bench -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

func TestTableGolden(t *testing.T) {
	var b bytes.Buffer
	fixedResult().WriteTable(&b)
	golden(t, "table.golden", b.Bytes())
}

func TestCompareGolden(t *testing.T) {
	a, b := fixedResult(), fixedResult()
	for i := range b.Totals {
		b.Totals[i].ReqPerSec *= 0.5
	}
	b.Warnings = nil
	var out bytes.Buffer
	Compare(&out, a, b)
	golden(t, "compare.golden", out.Bytes())
}

// A result survives the JSON file, histograms included.
func TestResultJSONRoundTrip(t *testing.T) {
	a := fixedResult()
	var buf bytes.Buffer
	if err := a.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	b, err := ReadResult(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var ta, tb bytes.Buffer
	a.WriteTable(&ta)
	b.WriteTable(&tb)
	if ta.String() != tb.String() {
		t.Error("table differs after a JSON round trip")
	}
	h, err := DecodeHist(b.Totals[0].ResponseHist)
	if err != nil || h.TotalCount() != a.Totals[0].Count {
		t.Errorf("decoded histogram: %v, %d values, want %d", err, h.TotalCount(), a.Totals[0].Count)
	}
	if _, err := ReadResult(strings.NewReader("{")); err == nil {
		t.Error("truncated file accepted")
	}
}

func TestFmtMs(t *testing.T) {
	for v, want := range map[float64]string{0.123: "0.123", 5: "5.000", 12.345: "12.35", 123.45: "123.5", 5022: "5022"} {
		if got := fmtMs(v); got != want {
			t.Errorf("fmtMs(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestIntendedSchedule(t *testing.T) {
	start := time.Unix(0, 0)
	// 1000 ops/s over 4 workers: worker w's op i at (4i+w) ms.
	for _, c := range []struct {
		w int
		i int64
		t time.Duration
	}{{0, 0, 0}, {1, 0, time.Millisecond}, {3, 2, 11 * time.Millisecond}, {0, 250, time.Second}} {
		if got := Intended(start, 1000, c.w, 4, c.i).Sub(start); got != c.t {
			t.Errorf("Intended(w=%d, i=%d) = %v, want %v", c.w, c.i, got, c.t)
		}
	}
}

// A task run in one iteration has a Total that is its row (Run copies it
// rather than merging and encoding the histograms again): the same as the
// row made from a merged copy of its figures.
func TestOneIterationTotalIsItsRow(t *testing.T) {
	s := fixedStats(300*time.Microsecond, 5000, 3, 2)
	row := newRow("Get", "Get", 1, 2.5, s, []Point{{T: 0, Ops: 5000}})
	merged := newTaskStats()
	merged.merge(s)
	total := newRow("Get", "Get", 0, 2.5, merged, nil)
	row.Iteration, row.Series = 0, nil
	if !reflect.DeepEqual(row, total) {
		t.Errorf("total from a merged copy differs from the row:\n%+v\n%+v", total, row)
	}
}

// Two jobs that share a task are compared on it; the settings that differ
// are listed first; tasks of one side only say so.
func TestCompareAcrossJobs(t *testing.T) {
	a, b := fixedResult(), fixedResult()
	b.Config.Job, b.Config.Pipeline = "ycsb-b", Range{3, 10}
	b.Totals = []Row{b.Totals[1], {Task: "Read", Phase: "ycsb-b", ReqPerSec: 10}}
	b.Totals[0].Phase = "ycsb-b" // the Get of another job's phase
	b.Totals[0].ReqPerSec = a.Totals[1].ReqPerSec * 2
	var out bytes.Buffer
	Compare(&out, a, b)
	text := out.String()
	for _, want := range []string{
		"settings that differ (A → B):\n  job mixed → ycsb-b\n  pipeline 1 → 3-10\n",
		"PutCreate", "(only in A)", "Read", "(only in B)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("compare lacks %q:\n%s", want, text)
		}
	}
	var get string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "Get ") {
			get = l
		}
	}
	if f := strings.Fields(get); len(f) < 4 || f[3] != "2.00" || strings.Contains(get, "only in") {
		t.Errorf("Get is not matched across jobs with its ratio: %q", get)
	}
	out.Reset()
	Compare(&out, a, a)
	if !strings.Contains(out.String(), "settings: the same") {
		t.Errorf("same settings not said:\n%s", out.String())
	}
}

// compare refuses files that are not bench results, saying what they are.
func TestReadResultRefusesOtherKinds(t *testing.T) {
	for in, want := range map[string]string{
		`{}`: "not a troop bench result",
		`{"kind":"troop run report","config":{},"verdict":{},"baseline":[]}`:    "troop run compare",
		`{"troop_version":"x","config":{},"verdict":{"ok":true},"baseline":[]}`: "troop run compare",
		`{"config":{},"rows":[],"totals":[],"client_cpu":{}}`:                   "names no job",
	} {
		if _, err := ReadResult(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadResult(%s) = %v, want an error with %q", in, err, want)
		}
	}
}
