package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// longVerbs stop cleanly on SIGINT or SIGTERM: the first signal ends their
// context, so they stop, write what they have and undo what they started;
// a second forces the exit at once. The process then exits 128 plus the
// signal's number (130 for SIGINT, 143 for SIGTERM), as shells report a run
// a signal ended. Other verbs (the node, the lab's supervisor, the chaos
// watchdog) keep their own handling.
var longVerbs = map[string]bool{
	"troop bench":      true,
	"troop run":        true,
	"troop ldfi run":   true,
	"troop ldfi demo":  true,
	"troop chaos kill": true,
	"troop repair":     true,
	"troop demo":       true,
}

// interrupts catches the signals of a long verb.
type interrupts struct {
	stderr io.Writer
	exit   func(int) // os.Exit, the second signal's way out

	mu  sync.Mutex
	got os.Signal // the first signal, nil until one came
}

// catch starts watching for SIGINT and SIGTERM and returns a context that
// ends with the first of them. The watch lasts as long as the process.
func (in *interrupts) catch(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-ch
		in.mu.Lock()
		in.got = s
		in.mu.Unlock()
		fmt.Fprintf(in.stderr, "\ntroop: %s: stopping, keeping what was measured and undoing what was started; %s again to exit at once\n",
			signalName(s), signalName(s))
		cancel()
		s2 := <-ch
		fmt.Fprintf(in.stderr, "troop: %s again: exiting now\n", signalName(s2))
		in.exit(exitStatus(s))
	}()
	return ctx
}

// signal is the first signal caught, or nil.
func (in *interrupts) signal() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.got
}

// exitStatus is a shell's status for a run that signal s ended.
func exitStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
