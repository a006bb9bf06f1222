package topology

import (
	"strings"

	didyoumean "github.com/troop-lab/troop/internal/suggest"
)

// suggest returns the known key a mistyped one most likely meant, or "" when
// no single key is close: case and '-' for '_', a forgotten troop_ prefix,
// then the unique key within a small edit distance (internal/suggest).
func suggest(name string) string {
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	if keyIndex[norm] == nil && keyIndex["troop_"+norm] != nil {
		return "troop_" + norm
	}
	return didyoumean.Closest(name, keyNames)
}

// keyNames are the keys troop knows, for suggest.
var keyNames = func() []string {
	out := make([]string, len(keys))
	for i := range keys {
		out[i] = keys[i].name
	}
	return out
}()
