package topology

import "strings"

// suggest returns the known key a mistyped one most likely meant, or "" when
// no single key is close. It tries, in order: case and '-' for '_', a
// forgotten troop_ prefix, then the unique key within a small edit distance.
func suggest(name string) string {
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	if norm != name && keyIndex[norm] != nil {
		return norm
	}
	if keyIndex["troop_"+norm] != nil {
		return "troop_" + norm
	}
	// Long strings are not typos of a key, and distance is quadratic.
	if len(norm) > 64 {
		return ""
	}
	// Allow about one slip per five letters, at least one.
	limit := max(1, min(3, len(norm)/5))
	best, bestDist, ties := "", limit+1, 0
	for i := range keys {
		d := editDistance(norm, keys[i].name)
		switch {
		case d < bestDist:
			best, bestDist, ties = keys[i].name, d, 1
		case d == bestDist:
			ties++
		}
	}
	if ties != 1 {
		return ""
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// adjacent bytes that turn a into b (optimal string alignment distance): a
// swap ("listne") is the most common typo and counts once.
func editDistance(a, b string) int {
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
