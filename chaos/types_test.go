package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type outage struct {
	out bool
	err error
}

func (o outage) Outage(context.Context) (bool, error) { return o.out, o.err }

func TestCheckOutageFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		oc   OutageChecker
		want bool
	}{
		{nil, true},
		{outage{}, true},
		{outage{out: true}, false},
		{outage{err: errors.New("status page down")}, false},
		{outage{out: false, err: errors.New("timeout")}, false},
	} {
		ok, why, _ := CheckOutage(context.Background(), tc.oc)
		if ok != tc.want || (!ok && why != InOutage) {
			t.Errorf("%+v: ok %v reason %q", tc.oc, ok, why)
		}
	}
}

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		o    Outcome
		r    Reason
		want bool
	}{
		{Executed, "", true}, {Failed, "", true}, {Skipped, Leashed, true},
		{Skipped, InOutage, false}, {Skipped, MinGap, false}, {Skipped, Stopped, false}, {Skipped, Holiday, false},
	} {
		if got := (Termination{Outcome: tc.o, Reason: tc.r}).Counts(); got != tc.want {
			t.Errorf("%s/%s counts: %v", tc.o, tc.r, got)
		}
	}
}

func TestJSON(t *testing.T) {
	k := PlannedKill{Group: "g", Day: d("2026-03-09"), At: time.Date(2026, 3, 9, 10, 0, 0, 0, time.UTC),
		Action: Action{Kind: Pause, Duration: 30 * time.Second}, Pick: 7}
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"day":"2026-03-09"`) || !strings.Contains(string(b), `"kind":"pause"`) {
		t.Errorf("json: %s", b)
	}
	var back PlannedKill
	if err := json.Unmarshal(b, &back); err != nil || back.Day != k.Day || back.Action != k.Action || !back.At.Equal(k.At) {
		t.Errorf("round trip: %+v %v", back, err)
	}
	b, _ = json.Marshal(Termination{Group: "g", Outcome: Skipped, Reason: Leashed})
	if strings.Contains(string(b), "planned") || strings.Contains(string(b), "executed\":\"0001") {
		t.Errorf("zero times are written: %s", b)
	}
}

func TestTerminationJSONRecovery(t *testing.T) {
	in := Termination{ID: 7, Group: "g", Outcome: Executed, Executed: time.Date(2026, 3, 9, 10, 0, 0, 0, time.UTC),
		Recovery: 1500 * time.Millisecond}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"recovery_seconds":1.5`) || !strings.Contains(string(b), `"id":7`) {
		t.Errorf("json: %s", b)
	}
	var back Termination
	if err := json.Unmarshal(b, &back); err != nil || back.Recovery != in.Recovery || back.ID != 7 || !back.Executed.Equal(in.Executed) {
		t.Errorf("round trip: %+v %v", back, err)
	}
	b, _ = json.Marshal(Termination{Group: "g"})
	if strings.Contains(string(b), "recovery") {
		t.Errorf("an unmeasured recovery is written: %s", b)
	}
}
