package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

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
	fs.Func("state-dir", "state `directory` (env TETHER_STATE_DIR; default $XDG_STATE_HOME/tether or ~/.local/state/tether); an existing one must be private and yours", func(v string) error {
		c.stateDir, c.stateDirSet = v, true
		return nil
	})
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: trace, debug, info, warn, error or off; debug also logs the whole chain of an error")
	fs.DurationVar(&c.lockTimeout, "lock-timeout", c.lockTimeout, "how long to wait while another tether holds the store without letting go (commands queued behind each other wait their turn)")
	fs.StringVar(&c.allowCaps, "allow-caps", c.allowCaps, "capability allow `list` for exec tasks, comma-separated (env TETHER_ALLOW_CAPS; default Nomad's exec list, without net_raw)")
	fs.StringVar(&c.chrootEnv, "chroot-env", c.chrootEnv, "what an exec task's root is made of: `entries` SRC or SRC:DST, comma-separated, each bound read-only (env TETHER_CHROOT_ENV; default Nomad's chroot_env)")
	fs.StringVar(&c.allowSeccompFlag, "allow-seccomp", c.allowSeccompFlag, "what an exec task's seccomp may name besides \"default\": `list` of unconfined and profile paths, comma-separated (env TETHER_ALLOW_SECCOMP; default none); unconfined also runs exec tasks unfiltered on a host without seccomp")
	fs.StringVar(&c.allowMissingFlag, "allow-missing", c.allowMissingFlag, "sandbox `parts` exec tasks may run without where the host lacks them: cgroupns, keyring, comma-separated (env TETHER_ALLOW_MISSING; default none: such a host refuses exec tasks)")
	fs.StringVar(&c.allowReadDirs, "allow-read", c.allowReadDirs, "host `directories`, comma-separated, a job file's template (source, file) or local artifact may read besides the task's own and its group's (env TETHER_ALLOW_READ; default none)")
	fs.BoolVar(&c.noAgent, "no-agent", c.noAgent, "work daemonless even if an agent serves the state directory (refused while one holds its store)")
	fs.MarkGlobal("state-dir", "log-level", "lock-timeout", "allow-caps", "chroot-env", "allow-seccomp", "allow-missing", "allow-read", "no-agent")
	if !startsTasks {
		for _, name := range []string{"allow-caps", "chroot-env", "allow-seccomp", "allow-missing", "allow-read"} {
			_ = fs.MarkHidden(name)
		}
	}
}

// parse parses a command's arguments: flags anywhere, up to a "--" or a
// command line. It returns an exit code when the command should end at
// once (help, or a bad flag).
func (c *cli) parse(fs *flagSet, args []string) (int, bool) {
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
