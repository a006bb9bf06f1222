// Package outfile writes the files troop's verbs produce (results, reports,
// scenarios) through the writers their types already have, and checks
// before a run that they can be written, so that no run's figures are lost
// to a mistyped path at its end.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write fills path with write, reporting the first error, the close's
// included. The file appears whole or not at all: it is written beside
// path under a temporary name and renamed over it, so an interrupted write
// leaves no truncated file (and an earlier one is kept).
func Write(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Check says whether path can be written later: its directory exists and
// takes a new file, and path itself is not a directory. It leaves nothing
// behind. flag names the option for the message ("--out").
func Check(flag, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s is a directory: give a file name", flag, path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s: the directory %s does not exist", flag, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", flag, path, dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, path, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// CheckDir says whether dir can hold a run's files: it exists and takes a
// new file, or it can be created. Nothing it did not find is left behind.
func CheckDir(flag, dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		// The nearest ancestor that exists must take a new directory.
		parent := filepath.Dir(dir)
		for parent != filepath.Dir(parent) {
			if _, err := os.Stat(parent); err == nil {
				break
			}
			parent = filepath.Dir(parent)
		}
		probe, err := os.MkdirTemp(parent, ".troop-probe-*")
		if err != nil {
			return fmt.Errorf("%s %s: cannot create it: %w", flag, dir, err)
		}
		os.Remove(probe)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is a file, not a directory", flag, dir)
	}
	return Check(flag, filepath.Join(dir, "probe"))
}
