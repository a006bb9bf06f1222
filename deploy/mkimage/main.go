// Command mkimage builds one of troop's container images without a registry
// and loads it into the Docker Engine (`make image` runs it for both):
//
//	go run ./deploy/mkimage --node bin/troop-node --tag troop-node:latest [--tag troop-node:VERSION]
//	go run ./deploy/mkimage --troop bin/troop --tag troop:latest [--tag troop:VERSION]
//
// The node image runs a store node and its redis-server; the troop image
// carries the whole troop, for troop bench's shards. The binary must be
// static (CGO_ENABLED=0); redis-server and bash come from this host, with
// their libraries. --out also writes the root file system as a tar file,
// which `docker import` loads the same way.
package main

import (
	"context"
	"errors"
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
		node  = flag.String("node", "", "build the node image of this static troop-node binary")
		troop = flag.String("troop", "", "build the troop image of this static troop binary")
		out   = flag.String("out", "", "also write the root file system to this tar file")
		names tags
	)
	flag.Var(&names, "tag", "a name for the image (repeat for several); default troop-node:latest or troop:latest")
	flag.Parse()
	if err := run(*node, *troop, *out, names); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(node, troop, out string, names []string) error {
	var img *deploy.Image
	var err error
	switch {
	case (node == "") == (troop == ""):
		return errors.New("name one binary: --node TROOP-NODE for the node image, or --troop TROOP for the troop image")
	case node != "":
		img, err = deploy.NodeImage(node)
		if len(names) == 0 {
			names = []string{"troop-node:latest"}
		}
	default:
		img, err = deploy.TroopImage(troop)
		if len(names) == 0 {
			names = []string{"troop:latest"}
		}
	}
	if err != nil {
		return err
	}
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		if err := img.FS.WriteTar(f); err != nil {
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
	id, err := deploy.Import(ctx, api, img, names[0], nil)
	if err != nil {
		return err
	}
	for _, n := range names[1:] {
		if _, err := api.ImageTag(ctx, client.ImageTagOptions{Source: id, Target: n}); err != nil {
			return fmt.Errorf("tag %s: %w", n, err)
		}
	}
	fmt.Printf("%s: %s (%.1f MB of files)\n", strings.Join(names, ", "), id, float64(img.FS.Size())/1e6)
	return nil
}
