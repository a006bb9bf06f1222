package node

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/troop-lab/troop/ring"
)

// The replicas a view looks up are those its racks' rings give, for every
// token: on each ring token, beside it, past the last and at the ends.
func TestViewReplicasMatchRings(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 3))
		v := &view{}
		var probes, earlier []uint32
		for rack := range 1 + r.IntN(4) {
			var entries []ring.Entry
			for range 1 + r.IntN(5) {
				tok := r.Uint32()
				if r.IntN(4) == 0 && len(earlier) > 0 {
					tok = earlier[r.IntN(len(earlier))] // a token another rack has too
				}
				if slices.ContainsFunc(entries, func(e ring.Entry) bool { return e.Token == tok }) {
					continue
				}
				entries = append(entries, ring.Entry{Token: tok, Owner: len(v.members)})
				v.members = append(v.members, &member{})
				probes = append(probes, tok-1, tok, tok+1)
			}
			for _, e := range entries {
				earlier = append(earlier, e.Token)
			}
			rg, err := ring.New(entries)
			if err != nil {
				t.Fatal(err)
			}
			v.localRacks = append(v.localRacks, rackRing{name: fmt.Sprint("rack", rack), ring: rg})
		}
		v.indexReplicas()
		probes = append(probes, 0, math.MaxUint32)
		for range 50 {
			probes = append(probes, r.Uint32())
		}
		for _, h := range probes {
			want := make([]*member, len(v.localRacks))
			for i, rr := range v.localRacks {
				want[i] = v.members[rr.ring.Owner(h)]
			}
			if got := v.replicas(h); !slices.Equal(got, want) {
				t.Fatalf("seed %d, token %d: replicas %p, the rings say %p", seed, h, got, want)
			}
		}
	}
}
