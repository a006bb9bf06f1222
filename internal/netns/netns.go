// Package netns runs code and starts processes inside Linux network
// namespaces, from a Go program and without cgo.
//
// A namespace is a property of a thread. Do runs a function on a goroutine
// locked to a thread that has entered the namespace: sockets it opens and
// processes it starts belong to that namespace and keep it, wherever they
// are used afterwards. The thread goes back to the namespace it came from
// before it is unlocked; should that fail, it is never reused.
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// New creates a network namespace holding only a loopback interface (down)
// and returns it open. It exists as long as the file is open or a process
// or socket is in it: close the file and stop its processes, and the kernel
// removes it with every interface inside.
func New() (*os.File, error) {
	var created *os.File
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("create a network namespace: %w", err)
		}
		var err error
		created, err = os.Open("/proc/thread-self/ns/net")
		return err
	})
	return created, err
}

// ErrGone is what Open's error wraps when the namespace no longer exists
// where it was recorded: its holder has ended.
var ErrGone = errors.New("the namespace is gone")

// Open opens the network namespace at path: /proc/PID/ns/net of a process
// in it, or /proc/PID/fd/N of a process holding it open. With ino not 0 it
// checks that the file is that namespace (Inode), so that a PID or file
// descriptor reused since it was recorded is not taken for it.
func Open(path string, ino uint64) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("network namespace %s: %w", path, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	got, err := Inode(f)
	if err != nil && ino != 0 {
		err = fmt.Errorf("network namespace %s: %w", path, ErrGone) // the descriptor now holds another file
	} else if err == nil && ino != 0 && got != ino {
		err = fmt.Errorf("network namespace %s is namespace %d, not %d: %w", path, got, ino, ErrGone)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Inode identifies a namespace: two files are the same namespace when
// their inodes are equal. It fails for a file that is no network namespace.
func Inode(f *os.File) (uint64, error) {
	ns, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil || ns != unix.CLONE_NEWNET {
		return 0, fmt.Errorf("%s is not a network namespace", f.Name())
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return st.Ino, nil
}

// Do runs f inside the namespace ns and returns its error. Sockets f opens
// stay in ns; processes it starts run in ns, and a parent-death signal set
// on them refers to a thread that outlives the call.
func Do(ns *os.File, f func() error) error {
	return onThread(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter network namespace %s: %w", ns.Name(), err)
		}
		return f()
	})
}

// onThread runs f on a locked thread and puts the thread back into the
// network namespace it was in before it unlocks it. A thread that cannot
// go back stays locked and ends with its goroutine (the main thread, which
// cannot end, stays parked), so no other goroutine ever runs in f's
// namespace.
func onThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("network namespace of this thread: %w", err)
			return
		}
		defer back.Close()
		ferr := f()
		if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("go back to network namespace %s: %w", back.Name(), err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// CheckRoot returns an error saying, in one sentence, that what needs
// root, unless this process is root.
func CheckRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s: network namespaces need root: run troop as root", what)
	}
	return nil
}

// Tool finds a networking tool (ip, iptables, tc): on PATH, else in
// /usr/sbin or /sbin, where root's tools live but a user's PATH may not
// reach.
func Tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH, in /usr/sbin or in /sbin (Debian: apt-get install %s)", name, packageOf[name])
}

var packageOf = map[string]string{"ip": "iproute2", "tc": "iproute2", "iptables": "iptables", "iptables-restore": "iptables"}

// Run runs the tool argv[0] with argv[1:] inside ns (nil: where the caller
// is), with stdin as its input and files as its descriptors 3, 4, ...
// (so that /proc/self/fd/3 names the first). It returns the standard
// output, or an error that holds the command line and what it printed.
func Run(ns *os.File, stdin string, files []*os.File, argv ...string) (string, error) {
	bin, err := Tool(argv[0])
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.ExtraFiles = files
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if ns == nil {
		err = cmd.Run()
	} else {
		err = Do(ns, cmd.Run)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + stdout.String())
		if stdin != "" {
			msg += "\ninput:\n" + stdin
		}
		return "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return stdout.String(), nil
}
