// Package prefetch asks the CPU to bring memory into its caches ahead of a
// read, so that a lookup in a table too large for the caches overlaps its
// miss with the work before it instead of stalling on it. A prefetch never
// faults and changes nothing but timing: any address may be given.
package prefetch
