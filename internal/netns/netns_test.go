package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestNamespace(t *testing.T) {
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ino, err := Inode(ns)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if host, _ := Inode(self); host == ino {
		t.Fatalf("the new namespace is this process's own (%d)", ino)
	}

	// Processes started inside run there: ip brings up its loopback.
	var out []byte
	err = Do(ns, func() error {
		var err error
		out, err = exec.Command("ip", "-o", "link", "show").CombinedOutput()
		if err == nil {
			err = exec.Command("ip", "link", "set", "lo", "up").Run()
		}
		return err
	})
	if err != nil {
		t.Fatalf("ip in the namespace: %v\n%s", err, out)
	}
	if links := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; links != 1 || !strings.Contains(string(out), "lo:") {
		t.Errorf("a new namespace has only lo; ip link shows:\n%s", out)
	}

	// The namespace has its own ports: one this process holds on the host
	// is free inside, and a listener opened inside stays inside, used from
	// any thread.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	addr := host.Addr().String()
	var ln net.Listener
	if err := Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s inside, which the host holds: %v", addr, err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("inside"))
			c.Close()
		}
	}()
	var got []byte
	if err := Do(ns, func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		got = make([]byte, 6)
		_, err = c.Read(got)
		return err
	}); err != nil || string(got) != "inside" {
		t.Errorf("dial %s inside its namespace: %q, %v", addr, got, err)
	}

	// Open finds it again through this process's descriptor, and checks the inode.
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.Fd())
	again, err := Open(path, ino)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if _, err := Open(path, ino+1); !errors.Is(err, ErrGone) {
		t.Errorf("Open with another inode: %v, want an error", err)
	}
	if _, err := Open("/proc/self/status", 0); err == nil {
		t.Error("Open of a file that is no namespace succeeded")
	}
}

func TestDoKeepsTheCallerOutside(t *testing.T) {
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ino, _ := Inode(ns)
	inside := func() (uint64, error) {
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return Inode(f)
	}
	// Many calls, so that the runtime reuses threads Do has unlocked.
	for i := range 200 {
		var got uint64
		if err := Do(ns, func() error { var err error; got, err = inside(); return err }); err != nil {
			t.Fatal(err)
		}
		if got != ino {
			t.Fatalf("call %d ran in namespace %d, not %d", i, got, ino)
		}
		if now, err := inside(); err != nil || now == ino {
			t.Fatalf("call %d: the caller's thread is in namespace %d afterwards (%v)", i, now, err)
		}
	}
}
