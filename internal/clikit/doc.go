// Package clikit is what tether's two binaries share of their command
// line: `tether` (the CLI, its executor and the init shim, on the path of
// every task start) and `tether-fleet` (`tether cluster …` and the agent's
// fleet mode, which link the etcd client that `tether` must not; see
// docs/fleet.md, "Two binaries").
//
// It holds the conventions a user meets in both, so that they cannot
// drift apart:
//
//   - flags (FlagSet): GNU-style through github.com/spf13/pflag, accepted
//     anywhere among a command's arguments up to a "--" or a command line;
//     FindCommand finds a command's name among flags given before it;
//   - help and usage errors: Usages lays out a flag list, FlagError says
//     what is wrong with a flag in one line, with a did-you-mean (Closest);
//   - durations: ParseDuration refuses a bare number, and takes days;
//   - text: Printable escapes what a terminal would not show as itself,
//     UserText drops the package prefixes of a wrapped error,
//     NaturalCompare orders names with their numbers as numbers;
//   - events: EventTable prints the lines of `tether events` (and of
//     `tether cluster events`, which follows them line by line), EventJSON
//     their --json objects;
//   - Sibling finds one binary beside the other;
//   - ManPage writes a manual page (roff) from a command's help: its
//     summary, usage lines, help text and flags.
//
// Usage, for one command:
//
//	fs := clikit.NewFlagSet("tether events", nil)
//	asJSON := fs.Bool("json", false, "print a JSON array")
//	if err := fs.ParseAnywhere(args); err != nil {
//		fmt.Fprintf(os.Stderr, "tether: %s\n", clikit.FlagError(fs, "events", err))
//		return 2
//	}
//	t := clikit.NewEventTable(os.Stdout)
//	t.Header()
//	for _, e := range evs {
//		t.Line(e)
//	}
package clikit
