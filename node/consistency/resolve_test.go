package consistency

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

func rep(version, value string) Reply {
	var v []byte
	if version != "" {
		v = []byte(version)
	}
	return Reply{Version: v, Raw: []byte(value)}
}

func TestResolve(t *testing.T) {
	for _, tt := range []struct {
		name     string
		replies  []Reply
		source   int
		stale    []int
		conflict bool
	}{
		{"agree", []Reply{rep("02", "a"), rep("02", "a")}, 0, nil, false},
		{"one stale", []Reply{rep("01", "old"), rep("02", "new"), rep("02", "new")}, 1, []int{0}, false},
		{"missing is oldest", []Reply{rep("", "nil"), rep("01", "a")}, 1, []int{0}, false},
		{"tombstone is newest", []Reply{rep("01", "a"), rep("02", "nil")}, 1, []int{0}, false},
		{"conflict, majority", []Reply{rep("05", "bad"), rep("05", "good"), rep("05", "good")}, 1, []int{0}, true},
		{"conflict, tie goes to the first", []Reply{rep("05", "x"), rep("05", "y")}, 0, []int{1}, true},
		{"conflict among the newest, older stale too", []Reply{rep("04", "o"), rep("05", "x"), rep("05", "y"), rep("05", "y")}, 2, []int{0, 1}, true},
		{"nothing versioned", []Reply{rep("", "a"), rep("", "a")}, 0, nil, false},
	} {
		source, stale, conflict := Resolve(tt.replies)
		if source != tt.source || !reflect.DeepEqual(stale, tt.stale) || conflict != tt.conflict {
			t.Errorf("%s: Resolve = %d %v %v, want %d %v %v", tt.name, source, stale, conflict, tt.source, tt.stale, tt.conflict)
		}
	}
}

// Properties over random answers: the source holds the newest version, no
// answer equal to the source is stale, every other answer is, and the
// result does not depend on anything but the answers.
func TestResolveProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + rng.IntN(7)
		replies := make([]Reply, n)
		for i := range replies {
			replies[i] = rep(fmt.Sprintf("%02d", rng.IntN(3)), string(rune('a'+rng.IntN(3))))
			if rng.IntN(5) == 0 {
				replies[i].Version = nil
			}
		}
		source, stale, _ := Resolve(replies)
		if !bytes.Equal(replies[source].Version, replies[Newest(replies)].Version) {
			t.Fatalf("%v: source %d is not of the newest version", replies, source)
		}
		isStale := map[int]bool{}
		for _, i := range stale {
			isStale[i] = true
		}
		for i, r := range replies {
			same := bytes.Equal(r.Version, replies[source].Version) && bytes.Equal(r.Raw, replies[source].Raw)
			if same == isStale[i] {
				t.Fatalf("%v: source %d, stale %v: answer %d misclassified", replies, source, stale, i)
			}
		}
	}
}
