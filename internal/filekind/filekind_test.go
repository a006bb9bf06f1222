package filekind

import (
	"strings"
	"testing"
)

func TestExpect(t *testing.T) {
	for _, tc := range []struct{ data, want, err string }{
		{`{"kind":"troop bench result"}`, BenchResult, ""},
		{`{"config":{},"rows":[],"totals":[],"client_cpu":{}}`, BenchResult, ""}, // written before "kind"
		{`{"config":{},"verdict":{},"baseline":[]}`, RunReport, ""},
		{`{}`, BenchResult, "it has none of its keys"},
		{`[]`, BenchResult, "not a JSON object"},
		{`{"a":`, BenchResult, "not JSON"},
		{`{"kind":"troop run report"}`, BenchResult, "but a troop run report: compare those with troop run compare"},
		{`{"config":{},"rows":[],"totals":[],"client_cpu":{}}`, RunReport, "troop bench compare"},
		{`{"kind":"ldfi"}`, RunReport, `not a troop run report but a "ldfi" file`},
	} {
		err := Expect([]byte(tc.data), tc.want)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Expect(%s, %s) = %v, want %q", tc.data, tc.want, err, tc.err)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte(`{"kind":"troop bench result"}`))
	f.Add([]byte(`{"config":{},"verdict":{},"baseline":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		Sniff(data)
	})
}
