// Package rootfs assembles a container's root file system from this host's
// files, for an image made with no registry (docker import, or a build
// context FROM scratch): programs go in with the ELF interpreter and the
// shared libraries they load, at the paths they have here, so that they run
// in the container as they run on the host.
package rootfs

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// FS is a root file system being assembled: absolute paths to contents.
type FS struct {
	files map[string]entry
}

type entry struct {
	data []byte
	mode int64
	dir  bool
}

// New returns an empty file system.
func New() *FS { return &FS{files: map[string]entry{}} }

// AddFile puts data at the absolute path p with mode (permission bits).
func (fs *FS) AddFile(p string, data []byte, mode int64) {
	fs.files[path.Clean(p)] = entry{data: data, mode: mode}
}

// AddDir makes an empty directory at p with mode; parents of files exist
// without it.
func (fs *FS) AddDir(p string, mode int64) {
	fs.files[path.Clean(p)] = entry{mode: mode, dir: true}
}

// libDirs are where the dynamic loader looks for a library by default, on
// the distributions the tests and the image builder run on.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// AddProgram copies this host's program (an absolute path, or a name looked
// up in PATH) to imagePath, with its ELF interpreter and every library it
// loads, transitively, at the paths they have on this host. Symbolic links
// are followed: the program lands under imagePath's own name, which matters
// to programs that look at argv[0] (Debian's redis-server is a link to
// redis-check-rdb, and runs as the one it is called).
func (fs *FS) AddProgram(imagePath, program string) error {
	hostPath, err := exec.LookPath(program)
	if err != nil {
		return err
	}
	return fs.addELF(imagePath, hostPath, true)
}

func (fs *FS) addELF(imagePath, hostPath string, deps bool) error {
	if _, ok := fs.files[imagePath]; ok {
		return nil
	}
	data, err := os.ReadFile(hostPath) // follows symlinks
	if err != nil {
		return err
	}
	fs.files[imagePath] = entry{data: data, mode: 0o755}
	if !deps {
		return nil
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", hostPath, err)
	}
	defer f.Close()
	var dirs []string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		interp := strings.TrimRight(string(b), "\x00")
		if err := fs.addELF(interp, interp, false); err != nil {
			return err
		}
		dirs = append(dirs, filepath.Dir(interp))
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	dirs = append(dirs, libDirs...)
libs:
	for _, lib := range libs {
		for _, d := range dirs {
			p := filepath.Join(d, lib)
			if _, err := os.Stat(p); err == nil {
				if err := fs.addELF(p, p, true); err != nil {
					return err
				}
				continue libs
			}
		}
		return fmt.Errorf("%s needs %s, not found on this host", hostPath, lib)
	}
	return nil
}

// Files calls fn for every file (not directory) in path order.
func (fs *FS) Files(fn func(p string, data []byte)) {
	for _, p := range fs.paths() {
		if e := fs.files[p]; !e.dir {
			fn(p, e.data)
		}
	}
}

func (fs *FS) paths() []string {
	ps := make([]string, 0, len(fs.files))
	for p := range fs.files {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Size is the total of the files' lengths.
func (fs *FS) Size() int64 {
	var n int64
	for _, e := range fs.files {
		n += int64(len(e.data))
	}
	return n
}

// WriteTar writes the file system as a tar stream, parents first, in path
// order and with fixed times and owners, so that the same files always make
// the same bytes (and so the same image layer).
func (fs *FS) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	var mkdirs func(dir string, mode int64) error
	mkdirs = func(dir string, mode int64) error {
		if dir == "/" || written[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir), 0o755); err != nil {
			return err
		}
		written[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: mode, ModTime: time.Unix(0, 0)})
	}
	for _, p := range fs.paths() {
		e := fs.files[p]
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("rootfs: %q is not an absolute path", p)
		}
		if e.dir {
			if err := mkdirs(p, e.mode); err != nil {
				return err
			}
			continue
		}
		if err := mkdirs(path.Dir(p), 0o755); err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// CheckStatic makes sure the binary at path needs no dynamic loader, which
// an image from scratch does not have.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: troop must build with CGO_ENABLED=0", path)
		}
	}
	return nil
}
