// Package suggest finds the name a user most likely meant when they
// mistyped one ("did you mean"): config keys, flag values.
package suggest

import (
	"slices"
	"strings"
)

// Closest returns the one candidate name most likely meant, or "" when no
// single candidate is close. It tries case and '-' for '_' first, then the
// unique candidate within a small edit distance: about one slip per five
// letters, at least one, at most three. A name that is a candidate needs
// no guess: "".
func Closest(name string, candidates []string) string {
	if slices.Contains(candidates, name) {
		return ""
	}
	fold := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	norm := fold(name)
	for _, c := range candidates {
		if fold(c) == norm && c != name {
			return c
		}
	}
	if len(norm) > 64 { // long strings are not typos, and distance is quadratic
		return ""
	}
	limit := max(1, min(3, len(norm)/5))
	best, bestDist, ties := "", limit+1, 0
	for _, c := range candidates {
		d := Distance(norm, fold(c))
		switch {
		case d < bestDist:
			best, bestDist, ties = c, d, 1
		case d == bestDist:
			ties++
		}
	}
	if ties != 1 {
		return ""
	}
	return best
}

// Distance counts the insertions, deletions, substitutions and swaps of
// adjacent bytes that turn a into b (optimal string alignment distance): a
// swap ("fualt") is the most common typo and counts once.
func Distance(a, b string) int {
	// Three rolling rows: the swap rule looks two rows back.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
