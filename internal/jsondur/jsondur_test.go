package jsondur

import (
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Timeout time.Duration   `json:"timeout"`
	Steps   []time.Duration `json:"steps,omitempty"`
	N       int             `json:"n"`
}

type outer struct {
	Name    string                   `json:"name"`
	Wait    time.Duration            `json:"wait"`
	Inner   inner                    `json:"inner"`
	Ptr     *inner                   `json:"ptr,omitempty"`
	ByName  map[string]time.Duration `json:"by_name,omitempty"`
	Out     io.Writer                `json:"-"`
	hidden  int
	Skipped func() `json:"-"`
}

func TestRoundTrip(t *testing.T) {
	in := outer{Name: "x", Wait: 1500 * time.Millisecond, Inner: inner{Timeout: time.Minute, Steps: []time.Duration{time.Second}, N: 3},
		Ptr: &inner{Timeout: 2 * time.Second}, ByName: map[string]time.Duration{"a": time.Hour}, hidden: 7}
	b, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"x","wait":"1.5s","inner":{"timeout":"1m0s","steps":["1s"],"n":3},"ptr":{"timeout":"2s","n":0},"by_name":{"a":"1h0m0s"}}`
	if string(b) != want {
		t.Fatalf("Marshal = %s\nwant      %s", b, want)
	}
	var back outer
	if err := Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	in.hidden = 0
	if !reflect.DeepEqual(back, in) {
		t.Fatalf("round trip: %+v, want %+v", back, in)
	}
}

// Files written before hold nanoseconds; fields the data leaves out keep
// the values they had.
func TestReadsNanosecondsAndKeepsDefaults(t *testing.T) {
	v := outer{Name: "default", Inner: inner{N: 9}}
	if err := Unmarshal([]byte(`{"wait":20000000000,"inner":{"timeout":"5s"}}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Wait != 20*time.Second || v.Inner.Timeout != 5*time.Second || v.Name != "default" || v.Inner.N != 9 {
		t.Fatalf("got %+v", v)
	}
	for _, bad := range []string{`{"wait":"soon"}`, `{"wait":true}`} {
		if err := Unmarshal([]byte(bad), &v); err == nil || !strings.Contains(err.Error(), "duration") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// A type without durations is encoded by encoding/json unchanged.
func TestPlain(t *testing.T) {
	type p struct {
		A int `json:"a"`
	}
	b, _ := Marshal(p{1})
	c, _ := json.Marshal(p{1})
	if string(b) != string(c) {
		t.Fatalf("%s != %s", b, c)
	}
}
