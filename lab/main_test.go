package lab

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// The test binary doubles as a stand-in troop binary for the detached
// supervisor: invoked as `lab supervise ...` it runs the real Supervise, and
// as `node --config FILE` it becomes a redis-server on the node's listen
// address, so the supervisor is tested before troop node exists.
//
// init locks the main goroutine to the main thread: fakeNode execs
// redis-server, and only the main thread carries the Pdeathsig that the
// supervisor set, so an exec from any other thread would lose it.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "lab" && os.Args[2] == "supervise" {
		os.Exit(fakeSupervise(os.Args[3:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(fakeNode(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func fakeSupervise(args []string) int {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	fd := fs.Int("ready-fd", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var ready *os.File
	if *fd > 0 {
		ready = os.NewFile(uintptr(*fd), "ready")
	}
	if err := Supervise(context.Background(), *dir, ready); err != nil {
		fmt.Fprintln(os.Stderr, "supervise:", err)
		return 1
	}
	return 0
}

// fakeNode replaces itself (same PID) with a redis-server listening where
// the node config says the node listens.
func fakeNode(args []string) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	config := fs.String("config", "", "")
	fs.String("log-format", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	f, err := os.Open(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var listen string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "listen: "); ok {
			listen = v
		}
	}
	f.Close()
	argv := standInNode(listen, filepath.Dir(*config))
	err = syscall.Exec(argv[0], argv, os.Environ())
	fmt.Fprintln(os.Stderr, "exec stand-in node:", err)
	return 1
}

// standInNode is a redis-server on addr: it answers PING like a node.
func standInNode(addr, dir string) []string {
	bin, err := FindRedisServer("")
	if err != nil {
		panic(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	sdir := filepath.Join(dir, "standin")
	os.MkdirAll(sdir, 0o755)
	return []string{bin, "--port", port, "--bind", host, "--protected-mode", "no", "--save", "", "--appendonly", "no",
		"--dir", sdir, "--daemonize", "no"}
}
