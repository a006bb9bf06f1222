package consistency

import (
	"fmt"
	"testing"
)

func TestQuorum(t *testing.T) {
	want := map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4}
	for r, q := range want {
		if got := Quorum(r); got != q {
			t.Errorf("Quorum(%d) = %d, want %d", r, got, q)
		}
	}
}

// finalWrite runs a write to completion: ok replicas acknowledge, failed ones
// answer with an error, the rest are unreachable; the local replica is the
// first in that order (ok, then failed, then unreachable) unless localDown.
func finalWrite(l Level, r, ok, failed int, localDown bool) Decision {
	t := Tally{Replicas: r}
	outcomes := make([]Outcome, 0, r)
	for i := 0; i < ok; i++ {
		outcomes = append(outcomes, OK)
	}
	for i := 0; i < failed; i++ {
		outcomes = append(outcomes, Failed)
	}
	for len(outcomes) < r {
		outcomes = append(outcomes, Unreachable)
	}
	if localDown { // the local replica is the last, unreachable one
		outcomes = append(outcomes[len(outcomes)-1:], outcomes[:len(outcomes)-1]...)
	}
	t.Local = Pending
	for i, o := range outcomes {
		switch o {
		case OK:
			t.OK++
		case Failed:
			t.Failed++
		case Unreachable:
			t.Unreachable++
		}
		if i == 0 {
			t.Local = o
		}
		if d := DecideWrite(l, t); d != Wait {
			return d
		}
	}
	return Wait
}

// The write column of the consistency table, for 1 to 7 racks.
func TestDecideWriteTable(t *testing.T) {
	for r := 1; r <= 7; r++ {
		q := Quorum(r)
		for ok := 0; ok <= r; ok++ {
			for failed := 0; ok+failed <= r; failed++ {
				name := fmt.Sprintf("R=%d ok=%d failed=%d", r, ok, failed)
				// DC_QUORUM: exactly when Q replicas acknowledged.
				if got, want := finalWrite(DCQuorum, r, ok, failed, false), verdict(ok >= q); got != want {
					t.Errorf("%s DC_QUORUM: %v, want %v", name, got, want)
				}
				// DC_SAFE_QUORUM: Q acknowledgements and no error answer.
				if got, want := finalWrite(DCSafeQuorum, r, ok, failed, false), verdict(ok >= q && failed == 0); got != want {
					t.Errorf("%s DC_SAFE_QUORUM: %v, want %v", name, got, want)
				}
				// DC_ONE: the local replica decides when it answers.
				if got, want := finalWrite(DCOne, r, ok, failed, false), verdict(ok > 0); got != want {
					t.Errorf("%s DC_ONE (local first): %v, want %v", name, got, want)
				}
			}
			// DC_ONE with the local replica unreachable fails over to any ack.
			if ok < r {
				if got, want := finalWrite(DCOne, r, ok, 0, true), verdict(ok > 0); got != want {
					t.Errorf("R=%d ok=%d DC_ONE local down: %v, want %v", r, ok, got, want)
				}
			}
		}
	}
}

func verdict(success bool) Decision {
	if success {
		return Succeed
	}
	return Fail
}

// DC_QUORUM answers as soon as Q replicas acknowledged: it never waits for
// the rest.
func TestDecideWriteQuorumEarly(t *testing.T) {
	for r := 1; r <= 7; r++ {
		q := Quorum(r)
		if got := DecideWrite(DCQuorum, Tally{Replicas: r, OK: q}); got != Succeed {
			t.Errorf("R=%d: %v after %d acks, want succeed", r, got, q)
		}
		if q > 1 {
			if got := DecideWrite(DCQuorum, Tally{Replicas: r, OK: q - 1}); got != Wait {
				t.Errorf("R=%d: %v after %d acks, want wait", r, got, q-1)
			}
		}
		// SAFE waits for everyone reachable.
		if r > q {
			if got := DecideWrite(DCSafeQuorum, Tally{Replicas: r, OK: q}); got != Wait {
				t.Errorf("R=%d SAFE: %v with replicas pending, want wait", r, got)
			}
		}
	}
}

func TestDecideReadTable(t *testing.T) {
	for r := 1; r <= 7; r++ {
		q := Quorum(r)
		for answered := 0; answered <= r; answered++ {
			tally := Tally{Replicas: r, OK: answered, Unreachable: r - answered}
			if got, want := DecideRead(DCQuorum, tally), verdict(answered >= q); got != want {
				t.Errorf("R=%d answered=%d DC_QUORUM: %v, want %v", r, answered, got, want)
			}
			for agree := 1; agree <= answered; agree++ {
				tally.Agreeing = agree
				if got, want := DecideRead(DCSafeQuorum, tally), verdict(agree >= q); got != want {
					t.Errorf("R=%d answered=%d agree=%d SAFE: %v, want %v", r, answered, agree, got, want)
				}
			}
		}
	}
}

func TestNewestAndAgreement(t *testing.T) {
	replies := []Reply{
		{Version: []byte("0001"), Raw: []byte("$1\r\na\r\n")},
		{Version: []byte("0003"), Raw: []byte("$1\r\nc\r\n")},
		{Version: []byte("0003"), Raw: []byte("$1\r\nc\r\n")},
		{Version: nil, Raw: []byte("$-1\r\n")},
	}
	if got := Newest(replies); got != 1 {
		t.Errorf("Newest = %d, want 1", got)
	}
	if size, i := LargestAgreement(replies); size != 2 || i != 1 {
		t.Errorf("LargestAgreement = %d at %d, want 2 at 1", size, i)
	}
	if got := Newest(replies[3:]); got != 0 {
		t.Errorf("Newest of one = %d", got)
	}
}

func TestParseLevel(t *testing.T) {
	for _, s := range []string{"DC_ONE", "dc_quorum", "Dc_Safe_Quorum"} {
		l, err := ParseLevel(s)
		if err != nil {
			t.Fatal(err)
		}
		if back, _ := ParseLevel(l.String()); back != l {
			t.Errorf("%s does not round trip", s)
		}
	}
	if _, err := ParseLevel("QUORUM"); err == nil {
		t.Error("QUORUM is not a troop level")
	}
}
