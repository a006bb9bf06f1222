// Command mkimage builds troop's container image without a registry and
// loads it into the Docker Engine (`make image` runs it):
//
//	go run ./deploy/mkimage --troop bin/troop --tag troop:latest [--tag troop:VERSION]
//
// troop must be static (CGO_ENABLED=0); redis-server and bash come from
// this host, with their libraries. --out also writes the root file system
// as a tar file, which `docker import` loads the same way.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/deploy"
)

type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	var (
		troop = flag.String("troop", "bin/troop", "the static troop binary to put in the image")
		out   = flag.String("out", "", "also write the root file system to this tar file")
		names tags
	)
	flag.Var(&names, "tag", "a name for the image (repeat for several); default troop:latest")
	flag.Parse()
	if len(names) == 0 {
		names = tags{"troop:latest"}
	}
	if err := run(*troop, *out, names); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(troop, out string, names []string) error {
	fs, err := deploy.Rootfs(troop)
	if err != nil {
		return err
	}
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		if err := fs.WriteTar(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	api, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer api.Close()
	if _, err := api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("no Docker Engine answers: %w", err)
	}
	id, err := deploy.Import(ctx, api, fs, names[0], nil)
	if err != nil {
		return err
	}
	for _, n := range names[1:] {
		if _, err := api.ImageTag(ctx, client.ImageTagOptions{Source: id, Target: n}); err != nil {
			return fmt.Errorf("tag %s: %w", n, err)
		}
	}
	fmt.Printf("%s: %s (%.1f MB of files)\n", strings.Join(names, ", "), id, float64(fs.Size())/1e6)
	return nil
}
