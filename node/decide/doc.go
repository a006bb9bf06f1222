// Package decide decides the order of read-modify-write commands on one key
// (INCR, SET NX, RPUSH, LPOP ...) among a key's replicas: per-key Paxos whose
// accepted value is changed by a function, CASPaxos. It is pure: no I/O, no
// clock, no randomness; the caller sends the requests it returns.
package decide
