package node

import (
	"fmt"
	"sort"
	"strings"
)

// commandDoc renders the command table of docs/store.md from commandTable,
// so the docs say what the code does (TestCommandDoc keeps them equal).
func commandDoc() string {
	byKind := map[kind][]string{}
	refused := map[string][]string{}
	for name, c := range commandTable {
		if c.kind == kindUnsupported {
			refused[c.why] = append(refused[c.why], name)
			continue
		}
		byKind[c.kind] = append(byKind[c.kind], name)
	}
	list := func(names []string) string {
		sort.Strings(names)
		return strings.Join(names, " ")
	}
	var b strings.Builder
	b.WriteString("| how | commands | what the client sees |\n|---|---|---|\n")
	row := func(how, names, what string) { fmt.Fprintf(&b, "| %s | %s | %s |\n", how, names, what) }
	row("routed by key, read", list(byKind[kindRead]), "the read at the connection's read level")
	row("routed by key, write", list(byKind[kindWrite]), "the write at the connection's write level")
	row("several keys that must share their replicas", list(append(byKind[kindMultiRead], byKind[kindMultiWrite]...)),
		"run as one command when all keys have the same owner in every rack (keys of one hash tag always do), a write at DC_QUORUM or DC_SAFE_QUORUM as a transaction over the keys' registers ([Consistency](#commands-on-several-keys-of-one-owner)); otherwise `ERR troop: the keys of 'X' belong to different nodes, and troop does not split it`. SORT without STORE is a read, with STORE a write (Redis sorts the members of a set it stores, so every replica stores the same list); its BY and GET patterns must keep the key's hash tag outside their `*` ([Sorting](#sorting))")
	row("split per key and merged", list(byKind[kindSplit]),
		"one request per key, each to its own replicas at the connection's level; the replies are merged. If any key fails, the whole command answers an error naming that key: no silent partial result. MSET is not atomic across keys (inside MULTI it is)")
	row("pops", list(byKind[kindDrawn]),
		"a pop of one key at DC_QUORUM or DC_SAFE_QUORUM is decided by consensus per key ([Consistency](#read-modify-write-commands-consensus-per-key)), one of several keys is a transaction over their registers ([Consistency](#commands-on-several-keys-of-one-owner)); otherwise the replica that decides transactions pops, and the others remove exactly what it took (and push it, for a move), as one transaction with the same version, at the connection's write level; the keys of a move or of LMPOP and ZMPOP must share their replicas; inside MULTI, the other replicas remove the members SPOP drew on the deciding one ([Pops](#pops))")
	row("blocking pops", list(byKind[kindBlocking]),
		"the node waits, looking at the keys on its own rack's replica, and runs the non-blocking pop (LPOP, LMOVE, ZPOPMIN ...) at the connection's write level once one holds something; within 20 ms of a push through another node, at once through this one, and before that push answers; inside MULTI they pop or answer nil at once, as in Redis ([Blocking pops](#blocking-pops))")
	row("scripts, routed by key", list(byKind[kindScript]),
		"a script that writes one key at DC_QUORUM or DC_SAFE_QUORUM is decided by consensus per key ([Consistency](#transactions-scripts-and-stream-writes-of-one-key)), one that writes several a transaction over their registers ([Consistency](#commands-on-several-keys-of-one-owner)); otherwise run on the deciding replica of their keys, which must share their replicas (otherwise `ERR troop: the keys of 'X' belong to different nodes`); the other replicas then take the value the script left in each key, with one version, at the connection's write level. A script with no keys runs read-only on this node's redis-server (a write in it is refused); the _RO forms run on this rack's replica. SCRIPT LOAD loads into every node, so EVALSHA runs through any ([Scripts](#scripts))")
	row("stream writes, decided by one replica", list(byKind[kindCopied]),
		"run as scripts are (by consensus per key for one key at DC_QUORUM or DC_SAFE_QUORUM): on the deciding replica of the key, and the other replicas take the stream it leaves, with one version, so XADD's IDs and a group's deliveries are the same everywhere; XREADGROUP's keys must share their replicas. XREAD and XREADGROUP with BLOCK wait as blocking pops do ([Streams](#streams))")
	row("transactional", list(byKind[kindTransaction]),
		"a transaction of one key at DC_QUORUM or DC_SAFE_QUORUM is decided by consensus per key ([Consistency](#transactions-scripts-and-stream-writes-of-one-key)), one of several keys of one owner is a transaction over their registers ([Consistency](#commands-on-several-keys-of-one-owner)); otherwise the queued commands run as one transaction on every replica when all their keys (and the watched ones) share their replicas; otherwise `EXECABORT` and nothing runs. A command refused while queueing (unknown, wrong arity, SAVE or SHUTDOWN with Redis's `Command not allowed inside a transaction`, one that changes the connection: AUTH, HELLO, CLIENT SETNAME or KILL, TROOP, SELECT of another database) makes EXEC answer `EXECABORT` and ends the MULTI, as in Redis ([Transactions](#transactions))")
	row("answered by the node", list(byKind[kindLocal]),
		"SELECT 0 only: troop serves database 0 of its redis-servers, and SELECT of another answers `ERR DB index is out of range`; HELLO 2 or 3, with AUTH and SETNAME, answers the version of the redis-server behind the node and `mode standalone`; INFO gives Redis's sections (server, clients, memory, persistence, stats, replication, cpu, modules, errorstats, cluster; commandstats and latencystats with all or everything) with the node's figures (its error replies by code in errorstats, failed and rejected calls in commandstats: [Clients](#clients)), the redis-server's version and the scripts it caches (memory's `number_of_cached_scripts`, less troop's own, and `used_memory_scripts`); CLIENT SETNAME, GETNAME, SETINFO, REPLY, and ID, LIST, INFO, KILL and UNBLOCK for the node's own client connections ([Clients](#clients)); RANDOMKEY answers a key of a node of this rack, the nodes tried in a random order; CONFIG GET reads this node's redis-server, CONFIG SET passes encoding parameters and lua-time-limit to every node's redis-server, and notify-keyspace-events, maxmemory and min-replicas-to-write to every node, which keeps them itself ([Keyspace notifications](#keyspace-notifications), [Maxmemory and busy scripts](#maxmemory-and-busy-scripts)), CONFIG RESETSTAT resets every node's redis-server and this node's INFO commandstats and errorstats; FLUSHALL, FLUSHDB and FUNCTION FLUSH empty every node when `troop_allow_flush` is set, FUNCTION LOAD, DELETE and RESTORE change every node, LIST, DUMP and STATS read this node's, SCRIPT LOAD, FLUSH and KILL and FUNCTION KILL reach every node and SCRIPT EXISTS reads this node's ([Scripts](#scripts)) ([Cluster-wide commands](#cluster-wide-commands)); COMMAND lists the table; AUTH password or AUTH user password, against `requirepass` and `troop_users` ([security.md](security.md)); SCAN, KEYS, DBSIZE and INFO keyspace cover the cluster's keys ([Scanning and counting keys](#scanning-and-counting-keys)); SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBE forms, PUBLISH, SPUBLISH and PUBSUB span the datacenter ([Pub/sub](#pubsub)); TROOP and DYNO_CONFIG:CONN_CONSISTENCY below. Inside MULTI, the commands that ask the cluster (FLUSHALL, FLUSHDB, CONFIG, DBSIZE, KEYS, SCAN, RANDOMKEY, INFO keyspace, SCRIPT, FUNCTION, PUBLISH, SPUBLISH, PUBSUB) run at EXEC in their place ([Transactions](#transactions))")
	var whys []string
	for why := range refused {
		whys = append(whys, why)
	}
	sort.Strings(whys)
	for _, why := range whys {
		row("refused: "+why, list(refused[why]), fmt.Sprintf("`ERR troop: 'X' is not supported: %s`", why))
	}
	row("anything else", "", "`ERR unknown command 'X', with args beginning with: ...`, as Redis says it")
	return b.String()
}
