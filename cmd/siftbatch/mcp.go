package main

import (
	"os"

	"github.com/sift/batch/cmd/siftbatch/internal/mcpcmd"
)

// runMCP is the mcp command: [mcpcmd.Command] on the process's stdin.
var runMCP = mcpcmd.Command(os.Stdin)
