package check

import (
	"testing"
	"time"
)

func w(c int, v int, call, ret int64) Op {
	return Op{Client: c, Key: "k", Write: true, Value: v, Call: call, Return: ret}
}
func r(c int, v int, call, ret int64) Op {
	return Op{Client: c, Key: "k", Value: v, Call: call, Return: ret}
}
func failed(c int, v int, call int64) Op {
	return Op{Client: c, Key: "k", Write: true, Value: v, Call: call, Return: call + 5, Failed: true, Error: "timeout"}
}

func TestCheckRegisters(t *testing.T) {
	tests := []struct {
		name         string
		ops          []Op
		linearizable bool
		stale        int
	}{
		{"sequential", []Op{w(0, 1, 0, 10), r(1, 1, 20, 30), w(0, 2, 40, 50), r(1, 2, 60, 70)}, true, 0},
		{"nothing written yet", []Op{r(1, Missing, 0, 10), w(0, 1, 20, 30)}, true, 0},
		{"read concurrent with the write sees either", []Op{w(0, 1, 0, 100), r(1, Missing, 10, 20), r(2, 1, 30, 40)}, true, 0},
		{"stale value after a later acknowledged write", []Op{w(0, 1, 0, 10), w(0, 2, 20, 30), r(1, 1, 40, 50)}, false, 1},
		{"missing after an acknowledged write", []Op{w(0, 1, 0, 10), r(1, Missing, 20, 30)}, false, 1},
		{"new then old: not linearizable, and the second read is stale",
			[]Op{w(0, 1, 0, 10), w(0, 2, 20, 100), r(1, 2, 30, 40), r(2, 1, 50, 60)}, false, 0},
		{"failed write may land late", []Op{w(0, 1, 0, 10), failed(0, 2, 20), r(1, 1, 40, 50), r(1, 2, 60, 70)}, true, 0},
		{"failed write may never land", []Op{w(0, 1, 0, 10), failed(0, 2, 20), r(1, 1, 40, 50)}, true, 0},
		{"value nobody wrote", []Op{w(0, 1, 0, 10), r(1, 7, 20, 30)}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckRegisters(tc.ops, 5*time.Second)
			if v.Linearizable() != tc.linearizable {
				t.Errorf("linearizable = %v (%s), want %v", v.Linearizable(), v.Result, tc.linearizable)
			}
			if v.StaleReads != tc.stale {
				t.Errorf("stale reads = %d %v, want %d", v.StaleReads, v.StaleSamples, tc.stale)
			}
			if !tc.linearizable && (v.Counterexample == nil || len(v.Counterexample.Ops) == 0) {
				t.Errorf("no counterexample")
			}
		})
	}
}

func TestCounterexampleIsTheShortestIllegalPrefix(t *testing.T) {
	ops := []Op{w(0, 1, 0, 10), r(1, 1, 20, 30), w(0, 2, 40, 50), r(1, 1, 60, 70), w(0, 3, 80, 90), r(1, 3, 100, 110)}
	v := CheckRegisters(ops, 5*time.Second)
	ce := v.Counterexample
	if ce == nil {
		t.Fatal("no counterexample")
	}
	last := ce.Ops[len(ce.Ops)-1]
	if last.Write || last.Value != 1 || last.Call != 60 {
		t.Fatalf("counterexample ends with %v, want the stale read at 60", last)
	}
	if len(ce.Ops) != 4 {
		t.Fatalf("counterexample has %d ops, want the 4 of the prefix", len(ce.Ops))
	}
}

func TestKeysAreCheckedSeparately(t *testing.T) {
	a := w(0, 1, 0, 10)
	b := r(1, Missing, 20, 30)
	b.Key = "other"
	if v := CheckRegisters([]Op{a, b}, time.Second); !v.Linearizable() || v.StaleReads != 0 {
		t.Fatalf("%+v", v)
	}
}

// A read may return a write called after it began (they overlap): the
// prefix that ends with the read keeps that write, so the counterexample
// is the real violation, later in the history, not that read.
func TestCounterexampleKeepsTheWritesItsReadsRead(t *testing.T) {
	ops := []Op{
		w(0, 1, 0, 10),
		r(1, 2, 20, 60), // reads the write below, called while it runs
		r(3, 1, 25, 26),
		w(2, 2, 30, 50),  // ...
		w(0, 3, 70, 80),  // then 3 is acknowledged,
		r(1, 2, 90, 100), // and a read after it returns 2: that is the violation
	}
	ce := CheckRegisters(ops, 5*time.Second).Counterexample
	if ce == nil {
		t.Fatal("no counterexample")
	}
	last := ce.Ops[len(ce.Ops)-1]
	if last.Write || last.Value != 2 || last.Call != 90 {
		t.Fatalf("counterexample %v, want it to end with the read at 90", ce.Ops)
	}
}

func TestVerdictProblem(t *testing.T) {
	if p := (Verdict{Result: "Ok"}).Problem(); p != "" {
		t.Errorf("a linearizable verdict's problem = %q", p)
	}
	w := Op{Client: 1, Key: "k", Write: true, Value: 7}
	v := Verdict{Result: "Illegal", StaleReads: 2, Counterexample: &Counterexample{Key: "k", Ops: []Op{w}}}
	if p := v.Problem(); p != "Illegal, 2 stale reads\n"+w.String() {
		t.Errorf("problem = %q", p)
	}
	if p := (Verdict{Result: "Ok", StaleReads: 1}).Problem(); p != "Ok, 1 stale reads" {
		t.Errorf("a stale read's problem = %q", p)
	}
}
