// Command tether-fleet is tether past one machine: `tether cluster …`, the
// fleet's commands on etcd, and `tether agent --node NAME --cluster URLS
// …`, the agent of a state directory (package agent, set up as `tether
// agent` is, by internal/agentcmd) hosting its node: its store mirrored
// to etcd, its liveness leased, its desired state from etcd converged
// with its --config-dir. See docs/fleet.md.
//
// It is a binary of its own because it links the etcd client (gRPC,
// protobuf, zap): 13 MB and some 120 package initialisers, which would
// double the start of every exec of tether. The plain `tether` binary is
// the CLI, the executor and an exec task's init shim, started up to three
// times for every task start, so it stays free of them (a test holds it
// to that); it hands `tether cluster …` and `tether agent --node/--cluster
// …` to this binary, found beside its own executable (then on $PATH), with
// the arguments as given. Nobody needs to call tether-fleet by its name;
// `make build` builds both.
//
// Usage:
//
//	tether agent --node n1 --cluster http://127.0.0.1:2379 [--config-dir DIR]
//	tether cluster --endpoints http://127.0.0.1:2379 status
//	tether cluster --endpoints URLS run web.nomad
//	tether cluster --endpoints URLS status web
//	tether cluster --endpoints URLS stop web
//	tether cluster --endpoints URLS start --node n1 web.hcl
//	tether cluster --endpoints URLS events web -f
//	tether cluster --endpoints URLS stop --node n1 web
//	tether cluster --endpoints URLS nodes --json
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/internal/proc"
)

// Exit codes (docs/cli.md).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	// Nothing this process inherited passes to what it starts (the fleet
	// agent's executors, and from them tasks): see
	// proc.CloseInheritedOnExec.
	if err := proc.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "tether: %v\n", err)
		os.Exit(exitError)
	}
	f := &fleet{stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(f.main(os.Args[1:]))
}

// fleet holds the global options and the output streams of one
// invocation.
type fleet struct {
	stdout, stderr io.Writer

	logLevel string
	log      hclog.Logger

	// The cluster's connection (clusterFlags).
	endpoints      string
	tlsCA, tlsCert string
	tlsKey         string
	timeout        time.Duration
}

// command is one of the binary's commands, or one of `tether cluster`'s.
type command struct {
	name    string
	args    string // usage after the command's name
	summary string
	more    string // help text after the flags
	run     func(f *fleet, args []string) int
}

// commands are the binary's own: what tether hands it.
func commands() []command {
	return []command{
		{name: "cluster", args: "COMMAND [flags]", summary: "the fleet's commands on etcd: status, nodes, events, run, start, stop", run: (*fleet).cmdCluster},
		agentCommand(),
		{name: "version", summary: "print tether-fleet's version (also --version)", run: (*fleet).cmdVersion},
	}
}

func lookupIn(cmds []command, name string) (command, bool) {
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return cmds[i], true
}

func names(cmds []command) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.name)
	}
	return out
}

func (f *fleet) usage(w io.Writer) {
	fmt.Fprint(w, `tether-fleet serves tether's fleet commands, which link the etcd client
that the plain tether binary leaves out; tether hands them over:

Usage: tether cluster COMMAND [flags] [args]
       tether agent --node NAME --cluster URLS [flags]   (this node's agent; 'tether agent --node NAME -h')

Commands:
`)
	for _, cmd := range clusterCommands() {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	_, global := f.clusterFlags("").Split()
	fmt.Fprintf(w, "\nGlobal flags, accepted anywhere:\n%s", clikit.Usages(append(global, clikit.HelpFlag)))
	fmt.Fprint(w, "\nRun 'tether cluster COMMAND -h' for a command's flags; docs/fleet.md has the rest.\n")
}

func (f *fleet) main(args []string) int {
	f.logLevel = "warn"
	at, ok := clikit.FindCommand(args, f.clusterFlags("").FlagSet, func(a string) bool {
		_, known := lookupIn(commands(), a)
		return known || a == "help"
	})
	if !ok {
		for _, a := range args {
			switch a {
			case "-h", "--help":
				f.usage(f.stdout)
				return exitOK
			case "--version":
				fmt.Fprintln(f.stdout, versionText())
				return exitOK
			}
		}
		if at >= 0 {
			msg := fmt.Sprintf("tether-fleet has no command %q", clikit.Printable(args[at]))
			if s := clikit.Closest(args[at], append(names(commands()), "help")); s != "" {
				msg += "; did you mean " + s + "?"
			}
			f.errorf("%s", msg)
			fmt.Fprintln(f.stderr, "  it serves `tether cluster …` and `tether agent --node …`: 'tether cluster -h' lists the cluster's commands")
			return exitUsage
		}
		f.usage(f.stderr)
		return exitUsage
	}
	rest := append(slices.Clone(args[:at]), args[at+1:]...)
	if args[at] == "help" {
		if len(rest) == 0 {
			f.usage(f.stdout)
			return exitOK
		}
		return f.main(append(rest, "--help"))
	}
	cmd, _ := lookupIn(commands(), args[at])
	return cmd.run(f, rest)
}

func (f *fleet) cmdVersion(args []string) int {
	fs := clikit.NewFlagSet("tether-fleet version", nil)
	if err := fs.ParseAnywhere(args); err != nil || fs.NArg() != 0 {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(f.stdout, "Usage: tether-fleet version")
			return exitOK
		}
		f.errorf("version takes no arguments")
		return exitUsage
	}
	fmt.Fprintln(f.stdout, versionText())
	return exitOK
}

// version is set at build time (-ldflags "-X main.version=v1.2.3").
var version string

func versionText() string { return clikit.VersionText("tether-fleet", version) }

// setup resolves the global options once the flags are parsed.
func (f *fleet) setup() error {
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q: use trace, debug, info, warn, error or off", f.logLevel)
	}
	f.log = hclog.New(&hclog.LoggerOptions{Name: "tether", Level: level, Output: f.stderr})
	return nil
}

// errorf prints an error for a person, as tether does: without the
// package prefixes of the errors in it (the whole chain is logged at
// debug level).
func (f *fleet) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if short := clikit.UserText(msg); short != msg {
		if f.log != nil {
			f.log.Debug("error chain", "err", msg)
		}
		msg = short
	}
	fmt.Fprintf(f.stderr, "tether: %s\n", msg)
}

// commandHelp prints a command's usage, its own flags and the global ones.
func (f *fleet) commandHelp(fs *clikit.FlagSet, prefix string, cmd command) {
	w := f.stdout
	fmt.Fprintf(w, "Usage: %s %s %s\n", prefix, cmd.name, cmd.args)
	fmt.Fprintf(w, "\n%s.\n", strings.ToUpper(cmd.summary[:1])+cmd.summary[1:])
	own, global := fs.Split()
	fmt.Fprintf(w, "\nFlags:\n%s", clikit.Usages(append(own, clikit.HelpFlag)))
	fmt.Fprintf(w, "\nGlobal flags:\n%s", clikit.Usages(global))
	if cmd.more != "" {
		fmt.Fprintf(w, "\n%s\n", cmd.more)
	}
}

// flagError says what is wrong with a flag, and where the flags are
// listed.
func (f *fleet) flagError(fs *clikit.FlagSet, name string, err error) {
	f.errorf("%s", clikit.FlagError(fs, name, err))
	fmt.Fprintf(f.stderr, "  'tether %s -h' lists its flags\n", name)
}
