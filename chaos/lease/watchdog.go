package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
)

// Watchdog reverts one lease at its end. It runs in its own process (see
// Spawn), so that the monkey's death does not leave the fault in place.
type Watchdog struct {
	Store  *Store
	ID     string
	Revert RevertFunc
	Logger *slog.Logger
	// Now and Sleep are time.Now and a context-aware sleep when nil; tests
	// replace them.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Poll is how often the lease file is read again while waiting, so that
	// a lease reverted by someone else (the global stop) ends the watchdog
	// early and a moved Until is seen. Default 1s.
	Poll time.Duration
	// GiveUp bounds the retries of a failing revert, counted from Until;
	// after it the watchdog exits and leaves the lease for the monkey's
	// sweep. Default DefaultGiveUp.
	GiveUp time.Duration
}

// DefaultGiveUp is how long after a lease's end a watchdog keeps retrying
// a failing revert.
const DefaultGiveUp = 10 * time.Minute

// Run waits for the lease's end, reverts it and deletes it. It returns nil
// when the lease is reverted or gone (reverted by someone else), and an
// error when ctx ends, the lease cannot be read or the revert keeps failing
// past GiveUp. It never waits longer than the lease's remaining time plus
// GiveUp.
func (w *Watchdog) Run(ctx context.Context) error {
	now, sleep := w.Now, w.Sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = ctxtime.Sleep
	}
	poll, giveUp := w.Poll, w.GiveUp
	if poll <= 0 {
		poll = time.Second
	}
	if giveUp <= 0 {
		giveUp = DefaultGiveUp
	}
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	retry := poll
	for {
		l, err := w.Store.Load(w.ID)
		if errors.Is(err, ErrNotFound) {
			log.Info("lease gone: reverted elsewhere", "lease", w.ID)
			return nil
		}
		if err != nil {
			return err
		}
		t := now()
		if left := l.Until.Sub(t); left > 0 {
			if err := sleep(ctx, min(left, poll)); err != nil {
				return err
			}
			continue
		}
		err = w.Store.Revert(ctx, l, w.Revert)
		if err == nil {
			log.Info("lease reverted", "lease", l.ID, "action", l.Action.String(), "instance", l.Instance.ID,
				"late", t.Sub(l.Until).Round(time.Millisecond).String())
			return nil
		}
		if t.Sub(l.Until) > giveUp {
			return fmt.Errorf("watchdog: giving up after %v: %w", giveUp, err)
		}
		log.Warn("revert failed; retrying", "lease", l.ID, "err", err, "in", retry.String())
		if err := sleep(ctx, retry); err != nil {
			return err
		}
		retry = min(2*retry, 30*time.Second)
	}
}

// Spawn starts argv as a detached process in its own session (setsid), so
// that neither the death of the caller nor a signal to the caller's process
// group or terminal reaches it. Its output goes to logPath (appended). The
// caller reaps it in the background while it lives; when the caller dies
// first, init does.
func Spawn(argv []string, logPath string) (pid int, err error) {
	if len(argv) == 0 {
		return 0, errors.New("lease: spawn: empty command")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("lease: spawn: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("lease: spawn %s: %w", argv[0], err)
	}
	go cmd.Wait()
	return cmd.Process.Pid, nil
}
