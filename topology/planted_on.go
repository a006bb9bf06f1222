//go:build planted

package topology

// PlantedBugsBuilt says whether this build can run planted bugs
// (troop_planted_bug): only a build with the tag planted can, which is
// what make test builds; a production node cannot be given one.
const PlantedBugsBuilt = true
