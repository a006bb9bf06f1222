// Package outfile writes the files troop's verbs produce (results, reports,
// scenarios) through the writers their types already have.
package outfile

import (
	"io"
	"os"
)

// Write creates path and fills it with write, reporting the first error,
// the close's included.
func Write(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
