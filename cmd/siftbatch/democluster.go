package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/democluster"
)

// runDemoCluster is the demo-cluster command: its flags, then
// [democluster.Run] with this command as the nodes' serve.
func runDemoCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("demo-cluster", "demo-cluster [flags]",
		"Run a cluster of three siftbatch serve --cluster processes on 127.0.0.1 (this\n"+
			"command itself), each with its own temporary store, and a fixture HTTP server.\n"+
			"Three callers submit jobs spread over the nodes; a live view shows which node\n"+
			"holds each job (its id's first 8 hex digits are the node's tag), its progress,\n"+
			"and what each node answers for it. Then node n3 is killed (SIGKILL): n1 and n2\n"+
			"answer 503 \"node unavailable\" for its jobs, go on with their own, and admit its\n"+
			"callers again; n3 is restarted on its store, and its jobs read failed \"restart\"\n"+
			"from every node. A summary tells what the kill cost.\n\n"+
			"Without --once, the three nodes keep serving after the summary until Ctrl-C.\n"+
			"Ctrl-C at any time stops every process (SIGTERM; a second Ctrl-C kills them)\n"+
			"and removes the temporary directory: exit 0 once every node has stopped on\n"+
			"SIGTERM; if a step fails, the nodes' logs are kept there and the demo says where.")
	o := democluster.Options{Pause: democluster.Pause}
	fs.BoolVar(&o.Once, "once", false, "end after the summary (exit 0 if every step succeeded, 1 if not),\ninstead of keeping the cluster up until Ctrl-C")
	fs.IntVar(&o.Targets, "targets", 8, fmt.Sprintf("targets per job of the first round (%d to %d); each takes about a second", democluster.MinTargets, democluster.MaxTargets))
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	if o.Targets < democluster.MinTargets || o.Targets > democluster.MaxTargets {
		return cli.CmdUsagef("demo-cluster", "--targets must be %d to %d (got %d)", democluster.MinTargets, democluster.MaxTargets, o.Targets)
	}
	var err error
	if o.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("demo-cluster: find this command: %w", err)
	}
	return democluster.Run(ctx, o, stdout, stderr)
}
