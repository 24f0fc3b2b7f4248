package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// newRootCommand builds the `orca` command tree writing to out and errOut.
func newRootCommand(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "orca",
		Short:         "orca: a Kubernetes-style orchestrator for edge fleets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	addConnectionFlags(root)
	root.PersistentFlags().String("nats-creds", "", "with --nats-url: the NATS .creds file to connect with (`orca nats creds -o`; orca-server's NATS takes only user JWTs)")
	root.AddCommand(newVersionCommand(), newWasmCommand(), newImageCommand(), newApplyCmd(), newDeleteCmd(), newWaitCmd(), newSecretsCommand(), newNATSCommand(), newTokenCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "orca %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
