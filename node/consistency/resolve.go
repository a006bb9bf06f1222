package consistency

import "bytes"

// Resolve picks, among replicas' answers for one key, the one to trust and
// those that are stale, for quorum reads and read repair:
//
//   - the newest version wins, and every answer with an older version is
//     stale (an answer without a version, a key troop never wrote, is the
//     oldest);
//   - when answers of the newest version differ in their bytes (a replica
//     was changed behind troop's back), the largest group of identical
//     answers wins, the earliest on a tie (callers list the local replica
//     first), and conflict is true: every answer outside the winning group
//     is stale.
//
// Resolve needs at least one reply.
func Resolve(replies []Reply) (source int, stale []int, conflict bool) {
	newest := Newest(replies)
	v := replies[newest].Version
	source, best := newest, 0
	for i := range replies {
		if !bytes.Equal(replies[i].Version, v) {
			continue
		}
		if !bytes.Equal(replies[i].Raw, replies[newest].Raw) {
			conflict = true
		}
		size := 0
		for j := range replies {
			if bytes.Equal(replies[j].Version, v) && bytes.Equal(replies[j].Raw, replies[i].Raw) {
				size++
			}
		}
		if size > best {
			source, best = i, size
		}
	}
	for i := range replies {
		if !bytes.Equal(replies[i].Version, v) || !bytes.Equal(replies[i].Raw, replies[source].Raw) {
			stale = append(stale, i)
		}
	}
	return source, stale, conflict
}
