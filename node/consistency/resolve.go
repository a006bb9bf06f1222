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
		if size := Holders(replies, i); size > best {
			source, best = i, size
		}
	}
	for i := range replies {
		if !replies[i].Same(replies[source]) {
			stale = append(stale, i)
		}
	}
	return source, stale, conflict
}

// Holders counts the replies identical to replies[source] (the same version
// and, when compared, the same bytes): the replicas known to hold the value
// a quorum read is about to return. With fewer than a quorum of them, the
// read must first write the value back to a quorum, or a later read could
// miss what this one returned.
func Holders(replies []Reply, source int) int {
	n := 0
	for _, r := range replies {
		if r.Same(replies[source]) {
			n++
		}
	}
	return n
}

// Same reports whether two replies are identical: the same version and the
// same bytes.
func (r Reply) Same(o Reply) bool {
	return bytes.Equal(r.Version, o.Version) && bytes.Equal(r.Raw, o.Raw)
}
