package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// Distribution names, as --distribution takes them.
const (
	Uniform = "uniform"
	Zipfian = "zipfian"
	Latest  = "latest"
	Hotspot = "hotspot"
)

// KeyDist picks key indexes in [0, n). Every choice is a function of the
// worker's random source alone (and, for latest, of the newest key the worker
// inserted), so a seed fixes the sequence.
type KeyDist interface {
	Next(r *rand.Rand, newest uint64) uint64
}

// NewKeyDist builds the named distribution over n keys. The zipfian constants
// cost O(n) to compute; build once and share: a KeyDist is immutable.
func NewKeyDist(name string, n uint64, hot HotspotSpec) (KeyDist, error) {
	switch name {
	case Uniform:
		return uniformDist{n}, nil
	case Zipfian:
		return scrambledZipfian{newZipf(n, zipfTheta)}, nil
	case Latest:
		return latestDist{newZipf(n, zipfTheta)}, nil
	case Hotspot:
		if err := hot.validate(); err != nil {
			return nil, err
		}
		return hotspotDist{n: n, hot: max(1, uint64(float64(n)*hot.KeyFraction)), opFrac: hot.OpFraction}, nil
	}
	return nil, fmt.Errorf("unknown key distribution %q: use uniform, zipfian, latest or hotspot", name)
}

type uniformDist struct{ n uint64 }

func (d uniformDist) Next(r *rand.Rand, _ uint64) uint64 { return r.Uint64N(d.n) }

// zipfTheta is YCSB's default skew constant.
const zipfTheta = 0.99

// zipf draws ranks 0..n-1 with P(rank i) proportional to 1/(i+1)^theta, by the
// method of Gray et al., "Quickly Generating Billion-Record Synthetic
// Databases" (SIGMOD 1994), which YCSB's zipfian generator follows: one
// uniform draw and a closed form, after an O(n) sum computed once.
type zipf struct {
	n                   uint64
	theta, alpha, zetan float64
	eta, half           float64 // half = 1 + 0.5^theta: the bound of rank 1
}

func newZipf(n uint64, theta float64) zipf {
	zetan := zeta(n, theta)
	zeta2 := zeta(2, theta)
	return zipf{
		n: n, theta: theta, zetan: zetan,
		alpha: 1 / (1 - theta),
		eta:   (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan),
		half:  1 + math.Pow(0.5, theta),
	}
}

// zeta is the generalized harmonic number sum_{i=1..n} 1/i^theta.
func zeta(n uint64, theta float64) float64 {
	s := 0.0
	for i := uint64(1); i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

func (z zipf) rank(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.half || z.n < 3 {
		return min(1, z.n-1)
	}
	k := uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(k, z.n-1)
}

// scrambledZipfian spreads the popular ranks over the key space by hashing
// them, as YCSB's scrambled zipfian does, so the hot keys are not the first
// ones loaded (and do not all land on one node of a ring).
type scrambledZipfian struct{ z zipf }

func (d scrambledZipfian) Next(r *rand.Rand, _ uint64) uint64 {
	return fnv64(d.z.rank(r)) % d.z.n
}

// fnv64 is FNV-1a over the eight bytes of v, little endian.
func fnv64(v uint64) uint64 {
	h := uint64(14695981039346656037)
	for range 8 {
		h ^= v & 0xff
		h *= 1099511628211
		v >>= 8
	}
	return h
}

// latestDist favours the keys inserted last: the newest key is the most
// popular, the one before it next, with zipfian weights (YCSB workload D).
type latestDist struct{ z zipf }

func (d latestDist) Next(r *rand.Rand, newest uint64) uint64 {
	back := d.z.rank(r)
	return (newest%d.z.n + d.z.n - back) % d.z.n
}

// HotspotSpec says how skewed the hotspot distribution is: OpFraction of the
// operations go to the first KeyFraction of the keys, the rest to the others.
type HotspotSpec struct {
	KeyFraction float64 `json:"key_fraction"`
	OpFraction  float64 `json:"op_fraction"`
}

func (h HotspotSpec) validate() error {
	if !(h.KeyFraction > 0 && h.KeyFraction < 1) || !(h.OpFraction > 0 && h.OpFraction < 1) {
		return fmt.Errorf("hotspot fractions must lie strictly between 0 and 1, got %g of keys for %g of operations", h.KeyFraction, h.OpFraction)
	}
	return nil
}

type hotspotDist struct {
	n, hot uint64
	opFrac float64
}

func (d hotspotDist) Next(r *rand.Rand, _ uint64) uint64 {
	if r.Float64() < d.opFrac || d.hot >= d.n {
		return r.Uint64N(d.hot)
	}
	return d.hot + r.Uint64N(d.n-d.hot)
}

// FormatKey writes key index i as "k" and zero-padded digits, size bytes in
// all: fixed-length keys, as VTest's fixed key generator makes them.
func FormatKey(dst []byte, i uint64, size int) []byte {
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], i, 10)
	dst = append(dst, 'k')
	for range size - 1 - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// minKeySize is the shortest key that can name every one of n keys.
func minKeySize(n uint64) int {
	return 1 + len(strconv.FormatUint(n-1, 10))
}

// Range is an inclusive integer range, such as a value size 100-1900 or a
// pipeline depth 3-10; Min == Max for a fixed number.
type Range struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// ParseRange reads "1024" or "100-1900".
func ParseRange(s string) (Range, error) {
	lo, hi, isRange := cutDash(s)
	a, err := strconv.Atoi(lo)
	if err != nil {
		return Range{}, fmt.Errorf("%q is not a number or a range like 3-10", s)
	}
	if !isRange {
		return Range{a, a}, nil
	}
	b, err := strconv.Atoi(hi)
	if err != nil || b < a {
		return Range{}, fmt.Errorf("%q is not a range like 3-10 (low-high, low <= high)", s)
	}
	return Range{a, b}, nil
}

func cutDash(s string) (string, string, bool) {
	for i := 1; i < len(s); i++ { // from 1: a leading '-' is a sign, not a range
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func (r Range) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}

// Draw picks uniformly in the range; a fixed number costs no random draw, so
// fixed and ranged configurations do not shift each other's sequences.
func (r Range) Draw(rng *rand.Rand) int {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rng.IntN(r.Max-r.Min+1)
}
