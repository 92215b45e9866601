package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/internal/clikit"
)

// cmdMan writes the manual pages, tether(1) and tether-COMMAND(1) for each
// command, into a directory (`make man`), from the tables the parser uses:
// the command table, each command's flag set as it parses with it
// (commandFlags) and its help text. Hidden: a tool of the build.
func (c *cli) cmdMan(args []string) int {
	fs := c.flags("man")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("man takes the directory to write the pages into")
		return exitUsage
	}
	dir := fs.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return c.fail(err)
	}
	for name, page := range manPages() {
		var b bytes.Buffer
		if err := page.Write(&b); err != nil {
			return c.fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".1"), b.Bytes(), 0o644); err != nil {
			return c.fail(err)
		}
	}
	return exitOK
}

// manVersion is the version the pages say they document.
func manVersion() string {
	if version != "" {
		return "tether " + version
	}
	return "tether"
}

// manPages returns every page by its name.
func manPages() map[string]clikit.ManPage {
	pages := map[string]clikit.ManPage{}
	var items []clikit.ManItem
	var seeAlso []string
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		name := "tether-" + cmd.name
		term := "tether " + cmd.name
		if cmd.alias != "" {
			term += ", tether " + cmd.alias
		}
		items = append(items, clikit.ManItem{Term: term, Text: upperFirst(cmd.summary) + ". See " + name + "(1)."})
		seeAlso = append(seeAlso, name+"(1)")
		page := clikit.ManPage{
			Name: name, Title: "tether " + cmd.name, Summary: cmd.summary, Version: manVersion(),
			Synopsis: strings.Split(cmd.args, "\n"), SeeAlso: []string{"tether(1)"},
		}
		desc := upperFirst(cmd.summary) + "."
		if cmd.alias != "" {
			desc += " Also: tether " + cmd.alias + "."
		}
		if cmd.more != "" {
			desc += "\n\n" + cmd.more
		}
		page.Description = desc
		if fs := commandFlags(cmd.name); fs != nil {
			own, global := fs.Split()
			page.Options, page.Global = append(own, clikit.HelpFlag), global
		} else {
			page.Description += "\n\nIts flags are tether-fleet's: tether " + cmd.name + " --help lists them."
		}
		pages[name] = page
	}
	var global []*pflag.Flag
	(&cli{logLevel: "warn"}).flags("help").VisitAll(func(f *pflag.Flag) {
		f.Hidden = false
		global = append(global, f)
	})
	global = append(global, clikit.HelpFlag, &pflag.Flag{Name: "version", Usage: "print tether's version", Value: new(clikit.BoolFlag)})
	pages["tether"] = clikit.ManPage{
		Name: "tether", Title: "tether", Version: manVersion(),
		Summary:  "runs tasks through executor processes that are never leaked",
		Synopsis: []string{"COMMAND [flags] [args]"},
		Description: `tether runs and supervises tasks (Nomad task and job files, or a command
line) through executor processes, with every step of a task's life
written ahead to an embedded event log: no daemon is needed, and no
executor is ever left behind. tether agent serves a state directory and
keeps its desired tasks running.

Flags go anywhere among a command's arguments, up to a "--" or the command
line that run, start and exec take. tether COMMAND -h, or tether help
COMMAND, lists a command's flags.`,
		Global: global,
		Sections: []clikit.ManSection{
			{Heading: "Commands", Items: items},
			{Heading: "Names", Text: namesMore},
			{Heading: "Exit status", Items: []clikit.ManItem{
				{Term: "0", Text: "done (run, wait, exec: the task's or command's own 0)"},
				{Term: "1", Text: "an error, said on stderr with what to do"},
				{Term: "2", Text: "a usage error: a bad flag or argument"},
				{Term: "125", Text: "tether could not start the task"},
				{Term: "126", Text: "the command exists but cannot be executed"},
				{Term: "127", Text: "the command does not exist"},
				{Term: "other", Text: "run, wait, exec and a failed start: the task's own code; 128+N when signal N killed it"},
			}},
			{Heading: "Environment", Items: []clikit.ManItem{
				{Term: "TETHER_STATE_DIR", Text: "the state directory, when --state-dir is not given (default: /var/lib/tether for root when it exists, else $XDG_STATE_HOME/tether or ~/.local/state/tether)"},
				{Term: "TETHER_ALLOW_CAPS, TETHER_CHROOT_ENV, TETHER_ALLOW_SECCOMP, TETHER_ALLOW_MISSING, TETHER_ALLOW_READ", Text: "the allow lists, when their flags are not given"},
				{Term: "TETHER_CRASHPOINT, TETHER_FAULT", Text: "inject a crash or a fault (tether debug crashpoints lists the points)"},
			}},
			{Heading: "Files", Items: []clikit.ManItem{
				{Term: "STATE/tether.db", Text: "the store: every task's event log"},
				{Term: "STATE/tasks/ID/", Text: "a task's directory: its output (stdout.log, stderr.log, rotated), its executor's socket and log"},
				{Term: "STATE/agent.sock", Text: "the agent's socket, while one serves the state directory"},
				{Term: "/etc/tether/", Text: "the task files tether-agent.service keeps running (--config-dir)"},
			}},
		},
		SeeAlso: seeAlso,
	}
	return pages
}
