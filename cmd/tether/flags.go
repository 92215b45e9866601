package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/internal/clikit"
)

// Flags follow the conventions tether and tether-fleet share
// (internal/clikit): GNU-style, accepted anywhere among a command's
// arguments, before its name too, up to a "--" or the start of a command
// line (run's and start's `-- CMD ARGS`, exec's `ID CMD ARGS`).

// flagSet is one command's flags (its own and the global ones) and what
// parsing them left.
type flagSet struct {
	*clikit.FlagSet
	cmd command
}

// flags returns the flag set of a command, with the global flags on it.
func (c *cli) flags(name string) *flagSet {
	cmd, _ := lookup(name)
	fs := &flagSet{FlagSet: clikit.NewFlagSet("tether "+name, cmd.line), cmd: cmd}
	c.globalFlags(fs, cmd.startsTasks)
	return fs
}

// globalFlags registers the global flags on fs. The capability allow list
// and the chroot environment are listed only for the commands that start
// tasks (they are accepted by all, as they always were).
func (c *cli) globalFlags(fs *flagSet, startsTasks bool) {
	c.g.Register(fs.FlagSet, startsTasks)
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: trace, debug, info, warn, error or off; debug also logs the whole chain of an error")
	fs.DurationVar(&c.lockTimeout, "lock-timeout", c.lockTimeout, "how long to wait while another tether holds the store without letting go (commands queued behind each other wait their turn)")
	fs.BoolVar(&c.noAgent, "no-agent", c.noAgent, "work daemonless even if an agent serves the state directory (refused while one holds its store)")
	fs.MarkGlobal("log-level", "lock-timeout", "no-agent")
}

// parse parses a command's arguments: flags anywhere, up to a "--" or a
// command line. It returns an exit code when the command should end at
// once (help, or a bad flag).
func (c *cli) parse(fs *flagSet, args []string) (int, bool) {
	if c.introspect {
		// Asked for the command's flags (help, completion, man pages):
		// the very set the command parses with, and nothing run.
		c.flagsOf = fs
		return exitOK, false
	}
	if err := fs.ParseAnywhere(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.commandHelp(c.stdout, fs)
			return exitOK, false
		}
		c.flagError(fs, err)
		return exitUsage, false
	}
	c.command = fs.cmd
	if err := c.setup(); err != nil {
		c.errorf("%v", err)
		return exitUsage, false
	}
	return 0, true
}

// commandFlags returns the flag set the command name parses its
// arguments with (its own flags and the global ones), as its run
// function builds it: the command runs as far as its parse and no
// further. nil for a command that parses nothing itself (cluster, which
// tether-fleet serves).
func commandFlags(name string) *flagSet {
	cmd, ok := lookup(name)
	if !ok || cmd.name == "cluster" {
		return nil
	}
	c := &cli{stdout: io.Discard, stderr: io.Discard, logLevel: "warn", lockTimeout: 10 * time.Second, introspect: true}
	cmd.run(c, nil)
	return c.flagsOf
}

// commandHelp prints a command's usage, its own flags and the global ones.
func (c *cli) commandHelp(w io.Writer, fs *flagSet) {
	cmd := fs.cmd
	for i, u := range strings.Split(cmd.args, "\n") {
		lead := "Usage:"
		if i > 0 {
			lead = "      "
		}
		fmt.Fprintf(w, "%s tether %s %s\n", lead, cmd.name, u)
	}
	fmt.Fprintf(w, "\n%s.\n", upperFirst(cmd.summary))
	if cmd.alias != "" {
		fmt.Fprintf(w, "Also: tether %s.\n", cmd.alias)
	}
	own, global := fs.Split()
	own = append(own, clikit.HelpFlag)
	fmt.Fprintf(w, "\nFlags:\n%s", clikit.Usages(own))
	fmt.Fprintf(w, "\nGlobal flags:\n%s", clikit.Usages(global))
	if cmd.more != "" {
		fmt.Fprintf(w, "\n%s\n", cmd.more)
	}
}

// flagError says what is wrong with a flag, and where the flags are
// listed.
func (c *cli) flagError(fs *flagSet, err error) {
	name, help := fs.cmd.name, fmt.Sprintf("'tether %s -h' lists its flags", fs.cmd.name)
	if name == "" {
		name, help = "tether", "'tether help' lists the commands and the global flags"
	}
	c.errorf("%s", clikit.FlagError(fs.FlagSet, name, err))
	fmt.Fprintf(c.stderr, "  %s\n", help)
}

// version is set at build time (-ldflags "-X main.version=v1.2.3"); when
// empty, the Go build information says what was built.
var version string

// versionText is what `tether version` prints.
func versionText() string { return clikit.VersionText("tether", version) }
