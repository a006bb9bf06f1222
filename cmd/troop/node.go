package main

import "github.com/troop-lab/troop/internal/nodecmd"

func init() { subcommands = append(subcommands, nodecmd.New) }
