package confdiff

import (
	"fmt"
	"testing"
	"time"
)

type rng struct{ Min, Max int }

func (r rng) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

type sub struct {
	Fault time.Duration `json:"fault"`
	Kinds []string      `json:"kinds"`
}

type conf struct {
	Job      string        `json:"job"`
	Pipeline rng           `json:"pipeline"`
	Duration time.Duration `json:"duration"`
	Seed     uint64        `json:"seed"`
	Nemesis  sub           `json:"nemesis"`
	Progress any           `json:"-"`
	hidden   int
}

func TestDiff(t *testing.T) {
	a := conf{Job: "mixed", Pipeline: rng{1, 1}, Duration: time.Minute, Seed: 1, Nemesis: sub{time.Second, []string{"loss"}}, hidden: 1}
	b := conf{Job: "ycsb-b", Pipeline: rng{3, 10}, Duration: time.Minute, Seed: 2, Nemesis: sub{2 * time.Second, []string{"loss", "delay"}}, Progress: 1}
	got := fmt.Sprint(Diff(a, b, "seed"))
	want := "[job mixed → ycsb-b pipeline 1 → 3-10 nemesis.fault 1s → 2s nemesis.kinds [loss] → [loss, delay]]"
	if got != want {
		t.Fatalf("Diff = %s\nwant   %s", got, want)
	}
	if d := Diff(a, a); len(d) != 0 {
		t.Fatalf("a configuration differs from itself: %v", d)
	}
	if d := Diff(a, b, "nemesis", "job", "pipeline", "seed"); len(d) != 0 {
		t.Fatalf("skipped keys listed: %v", d)
	}
}
