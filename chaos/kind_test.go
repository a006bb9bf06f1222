package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// sides renders cuts as "from>to" pairs, sorted, for comparison.
func sides(cuts []Cut) string {
	var s []string
	for _, c := range cuts {
		s = append(s, c.From+">"+c.To)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

func TestPartitionCuts(t *testing.T) {
	three := []string{"c", "a", "b"}
	five := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		mode  PartitionMode
		inst  string
		group []string
		want  string
	}{
		{Isolate, "b", three, "a>b b>a b>c c>b"},
		{OneWay, "b", three, "a>b c>b"},
		{Halves, "b", three, "a>b b>a b>c c>b"},                                        // 1 against 2
		{Halves, "d", []string{"a", "b", "c", "d"}, "a>b a>c b>a b>d c>a c>d d>b d>c"}, // {d, a} against {b, c}
		{Halves, "e", five, "a>b a>c a>d b>a b>e c>a c>e d>a d>e e>b e>c e>d"},         // {e, a} against {b, c, d}
		{Bridge, "b", three, "a>c c>a"},                                                // a and c see each other only through b
		{Bridge, "a", five, "b>d b>e c>d c>e d>b d>c e>b e>c"},                         // {b, c} and {d, e}, a in between
	} {
		cuts, err := PartitionCuts(tc.mode, tc.inst, tc.group)
		if err != nil {
			t.Errorf("%s of %s in %v: %v", tc.mode, tc.inst, tc.group, err)
			continue
		}
		if got := sides(cuts); got != tc.want {
			t.Errorf("%s of %s in %v:\n got  %s\n want %s", tc.mode, tc.inst, tc.group, got, tc.want)
		}
	}
	// Every mode, every instance, sizes 2 to 7: both sides non-empty, the
	// instance on the side the mode says, nothing cut within a side.
	for n := 2; n <= 7; n++ {
		var group []string
		for i := range n {
			group = append(group, fmt.Sprintf("n%d", i))
		}
		for _, mode := range PartitionModes {
			for _, inst := range group {
				cuts, err := PartitionCuts(mode, inst, group)
				if mode == Bridge && n < 3 {
					if err == nil {
						t.Errorf("bridge of %d instances: no error", n)
					}
					continue
				}
				if err != nil || len(cuts) == 0 {
					t.Errorf("%s of %s among %d: %v, %d cuts", mode, inst, n, err, len(cuts))
					continue
				}
				for _, c := range cuts {
					if c.From == c.To || (mode == Bridge && (c.From == inst || c.To == inst)) || (mode == OneWay && c.To != inst) {
						t.Errorf("%s of %s among %d cuts %s>%s", mode, inst, n, c.From, c.To)
					}
				}
				if mode == Halves {
					minority := map[string]bool{}
					for _, c := range cuts {
						if c.From == inst {
							minority[c.To] = true // the majority, seen from inst
						}
					}
					if len(minority) != n-n/2 {
						t.Errorf("halves of %d: a majority of %d, want %d", n, len(minority), n-n/2)
					}
				}
			}
		}
	}
}

func TestPartitionCutsRefuses(t *testing.T) {
	for _, tc := range []struct {
		mode  PartitionMode
		inst  string
		group []string
		want  string
	}{
		{Isolate, "a", []string{"a"}, "partition isolate of a: its group has no other instance, so one side would be empty"},
		{Halves, "a", []string{"a"}, "partition halves of a: its group has no other instance, so one side would be empty"},
		{Bridge, "a", []string{"a", "b"}, "partition bridge of a: its group has 2 instances; a bridge needs one on each side of it, so at least 3"},
		{Isolate, "z", []string{"a", "b"}, "partition: z is not in its group (a, b)"},
		{"split", "a", []string{"a", "b"}, `partition: unknown mode "split" (want isolate, halves, one-way or bridge)`},
	} {
		if _, err := PartitionCuts(tc.mode, tc.inst, tc.group); err == nil || err.Error() != tc.want {
			t.Errorf("%s of %s in %v: %v, want %q", tc.mode, tc.inst, tc.group, err, tc.want)
		}
	}
}

func TestNewAction(t *testing.T) {
	a, err := NewAction(Loss, 30*time.Second, map[string]string{"percent": "20"})
	if err != nil || a != (Action{Kind: Loss, Duration: 30 * time.Second, Percent: 20}) {
		t.Errorf("loss: %+v, %v", a, err)
	}
	if a, err := NewAction(Partition, 0, nil); err != nil || a != (Action{Kind: Partition, Duration: DefaultTemporaryDuration, Partition: Isolate}) {
		t.Errorf("partition with defaults: %+v, %v", a, err)
	}
	for _, tc := range []struct {
		kind   Kind
		d      time.Duration
		params map[string]string
		want   string
	}{
		{"flood", 0, nil, `unknown chaos type "flood" (want terminate, stop, pause, restart, burn-cpu, partition, loss, delay, clock-skew)`},
		{Terminate, time.Minute, nil, "terminate takes no duration: it is over when it is done"},
		{Terminate, 0, map[string]string{"percent": "5"}, "terminate takes no percent: it has no parameters"},
		{Loss, 2 * time.Hour, map[string]string{"percent": "5"}, "loss: duration 2h0m0s: want from 1s to 1h0m0s"},
		{Loss, 0, map[string]string{"percent": "-5"}, `loss: percent: "-5": want a percentage more than 0 and at most 100`},
		{Loss, 0, map[string]string{"percent": "100.5"}, `loss: percent: "100.5": want a percentage more than 0 and at most 100`},
		{Delay, 0, map[string]string{"delay": "50"}, `delay: delay: "50": want a duration from 1ms to 10s`},
		{ClockSkew, 0, map[string]string{"rate": "-1"}, `clock-skew: rate: "-1": want a number above -1 and at most 1 (seconds of drift per second)`},
		{ClockSkew, 0, map[string]string{"offset": "25h"}, `clock-skew: offset: "25h": want a duration from -24h0m0s to 24h0m0s`},
	} {
		if _, err := NewAction(tc.kind, tc.d, tc.params); err == nil || err.Error() != tc.want {
			t.Errorf("%s %v %v: %v\nwant %s", tc.kind, tc.d, tc.params, err, tc.want)
		}
	}
}
