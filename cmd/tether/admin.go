package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

func (c *cli) cmdRecover(args []string) int {
	fs := c.flags("recover")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("recover takes no arguments")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	// One recovery of the state directory at a time: a second one waits
	// for the first (and says so), then reconciles what is left.
	other := "" // the recovery this one waited for
	release, err := driver.LockRecovery(ctx, c.stateDir, func(holder int) {
		other = describeProcess(holder)
		fmt.Fprintf(c.stderr, "tether: %s is recovering this state directory; waiting for it to finish\n", other)
	})
	if err != nil {
		c.closeSession(s)
		return c.fail(err)
	}
	rep, rerr := s.svc.Recover(ctx)
	c.resumeGroups(ctx, s)
	release()
	c.closeSession(s)
	if len(rep.Tasks) == 0 {
		if rerr != nil {
			return c.fail(rerr)
		}
		if other != "" {
			fmt.Fprintf(c.stdout, "no live tasks left: %s recovered them ('tether status --all' and 'tether events ID' show what it did)\n", other)
			return exitOK
		}
		fmt.Fprintln(c.stdout, "no live tasks; nothing to recover")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM -> TO\tACTION")
	for _, t := range rep.Tasks {
		action := t.Action
		if t.Err != nil {
			action += fmt.Sprintf(" (error: %v)", t.Err)
		}
		fmt.Fprintf(tw, "%s\t%s -> %s\t%s\n", t.ID, t.From, t.To, clikit.Printable(action))
	}
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	if rerr != nil {
		c.errorf("recovery left problems (above); run 'tether recover' again, or check the executor logs under %s/tasks/ID", c.stateDir)
		return exitError
	}
	return exitOK
}

func (c *cli) cmdGraph(args []string) int {
	fs := c.flags("graph")
	format := fs.String("format", "mermaid", "`format`: mermaid or dot")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("graph takes no arguments")
		return exitUsage
	}
	var f fsm.GraphFormat
	switch *format {
	case "mermaid":
		f = fsm.Mermaid
	case "dot", "graphviz":
		f = fsm.Graphviz
	default:
		c.errorf("--format %q: use mermaid or dot", *format)
		return exitUsage
	}
	out, err := fsm.Lifecycle.Graph(f)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprint(c.stdout, out)
	if !strings.HasSuffix(out, "\n") {
		fmt.Fprintln(c.stdout)
	}
	return exitOK
}

func (c *cli) cmdCheck(args []string) int {
	fs := c.flags("check")
	salvage := fs.Bool("salvage", false, "copy every readable task into a new store (scanning its pages where its structure is gone), kill by proven identity the executors of the live tasks that cannot be carried over and record them lost, and put the new store in place (the old file is kept beside it)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("check takes no arguments")
		return exitUsage
	}
	path := c.dbPath()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(c.stdout, "%s: no store yet; nothing to check\n", path)
		return exitOK
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	if *salvage {
		return c.salvage(ctx, s)
	}
	// The check reads the file page by page, so it reports on a file that
	// Open refuses (agent.Local.Check).
	rep, err := s.svc.Check(ctx)
	if err != nil {
		return c.fail(fmt.Errorf("check could not finish: %w", err))
	}
	for _, line := range strings.Split(rep.String(), "\n") {
		fmt.Fprintln(c.stdout, clikit.Printable(line))
	}
	if !rep.OK() {
		c.errorf("the store %s is damaged: %d problems (above)", path, len(rep.Problems))
		fmt.Fprintln(c.stderr, "  'tether check --salvage' copies every readable task into a new store, kills what it cannot keep under control, and keeps the damaged file")
		return exitError
	}
	return exitOK
}

// salvage is check --salvage: the way out of a damaged store that keeps
// the running tasks under control (agent.Local.Salvage: driver.SalvageStore
// under the store's lock from its read to its install, so that nothing
// another command appended meanwhile is left behind in the damaged file).
// Every live executor is carried into the new store or killed by its
// proven identity and recorded lost; the tasks it could not account for
// are named, and it exits 1 then, or when anything it reports was not
// fully done. A sound store is said to be sound, not damaged.
func (c *cli) salvage(ctx context.Context, s *session) int {
	rep, err := s.svc.Salvage(ctx)
	sound := err == nil && len(rep.Damage) == 0 && len(rep.Lost) == 0 && rep.HeadsRebuilt == 0
	if sound && rep.Installed {
		fmt.Fprintf(c.stdout, "the store was sound (nothing damaged, nothing lost): its %d tasks were copied into a new store; the salvaged store is in place, and the old file is kept as %s\n", rep.Copied, rep.Aside)
		for _, w := range rep.Warnings {
			c.errorf("%s", w)
		}
		fmt.Fprintln(c.stdout, salvageTotals(rep))
		if !rep.Done {
			c.errorf("the salvage is not complete: see above")
			return exitError
		}
		return exitOK
	}
	if rep.Copied > 0 || err == nil {
		fmt.Fprintf(c.stdout, "copied %d tasks into a new store", rep.Copied)
		if rep.HeadsRebuilt > 0 {
			fmt.Fprintf(c.stdout, " (%d with a rebuilt head)", rep.HeadsRebuilt)
		}
		fmt.Fprintln(c.stdout)
	}
	for _, d := range rep.Damage {
		fmt.Fprintf(c.stdout, "damage not attributable to one task: %s\n", clikit.Printable(d))
	}
	var unaccounted []string
	for _, l := range rep.Lost {
		what := l.What
		if l.Settled && !l.State.Terminal() && rep.Installed {
			what += "; recorded lost in the new store"
		}
		fmt.Fprintf(c.stdout, "lost task %s (%s): %s\n  why: %s\n", clikit.Printable(l.ID), l.State, clikit.Printable(what), clikit.Printable(l.Why))
		if !l.Settled {
			unaccounted = append(unaccounted, clikit.Printable(l.ID))
		}
	}
	if err != nil {
		c.errorf("salvage: %v", err)
		if rep.Killed {
			fmt.Fprintf(c.stderr, "  the damaged store is still %s; the kills above are done\n", c.dbPath())
		}
		return exitError
	}
	fmt.Fprintf(c.stdout, "the salvaged store is in place; the damaged one is kept as %s\n", rep.Aside)
	for _, w := range rep.Warnings {
		c.errorf("%s", w)
	}
	fmt.Fprintln(c.stdout, salvageTotals(rep))
	switch {
	case len(unaccounted) > 0:
		c.errorf("the salvage is not complete: it could not account for %d tasks: %s (see above; their processes may still run)", len(unaccounted), strings.Join(unaccounted, ", "))
		return exitError
	case !rep.Done:
		c.errorf("the salvage is not complete: tasks on the damaged pages above may be missing from every list")
		return exitError
	}
	return exitOK
}

// salvageTotals counts what the salvage's lines show: the tasks copied,
// and the lost ones by what became of them.
func salvageTotals(rep agent.SalvageReport) string {
	var recorded, ended, open int
	for _, l := range rep.Lost {
		switch {
		case !l.Settled:
			open++
		case l.State.Terminal():
			ended++
		default:
			recorded++
		}
	}
	s := fmt.Sprintf("salvage: %d copied, %d lost", rep.Copied, len(rep.Lost))
	if len(rep.Lost) > 0 {
		s += fmt.Sprintf(" (%d killed or gone and recorded lost, %d had ended, %d not accounted for)", recorded, ended, open)
	}
	return s
}

func (c *cli) cmdGC(args []string) int {
	fs := c.flags("gc")
	olderThan := fs.Duration("older-than", 0, "remove only tasks that ended longer ago than this `duration`")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("gc takes no arguments")
		return exitUsage
	}
	if *olderThan < 0 {
		c.errorf("--older-than must not be negative")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	rep, err := s.svc.GC(ctx, *olderThan)
	for _, w := range rep.Warnings {
		c.errorf("%s", w)
	}
	if err != nil {
		return c.fail(err)
	}
	code := exitOK
	if rep.Failed {
		code = exitError
	}
	if len(rep.Orphans) > 0 {
		fmt.Fprintf(c.stdout, "removed %d task directories the store does not know: %s\n", len(rep.Orphans), strings.Join(rep.Orphans, ", "))
	}
	if len(rep.Allocs) > 0 {
		fmt.Fprintf(c.stdout, "removed %d group directories (allocs/) no task in the store has: %s\n", len(rep.Allocs), strings.Join(rep.Allocs, ", "))
	}
	if len(rep.Removed) == 0 {
		fmt.Fprintln(c.stdout, "no ended tasks to remove")
	} else {
		fmt.Fprintf(c.stdout, "removed %d tasks: %s\n", len(rep.Removed), strings.Join(rep.Removed, ", "))
	}
	fmt.Fprintf(c.stdout, "store compacted: %d -> %d bytes\n", rep.Before, rep.After)
	return code
}

func (c *cli) cmdDebug(args []string) int {
	fs := c.flags("debug")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	var points []string
	switch fs.Arg(0) {
	case "crashpoints":
		points = append(driver.CrashPoints(), agent.CrashPoints()...)
	case "faultpoints":
		points = driver.FaultPoints()
	case "host":
		if fs.NArg() != 1 {
			c.errorf("debug host takes no arguments")
			return exitUsage
		}
		h, err := cgroup.Probe()
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprint(c.stdout, h.String())
		fmt.Fprintln(c.stdout, "exec sandbox:")
		for _, l := range server.HostFeatures() {
			fmt.Fprintf(c.stdout, "  %s\n", l)
		}
		return exitOK
	default:
		c.errorf("debug: use 'tether debug crashpoints', 'tether debug faultpoints' or 'tether debug host'")
		return exitUsage
	}
	if fs.NArg() != 1 {
		c.errorf("debug %s takes no arguments", fs.Arg(0))
		return exitUsage
	}
	for _, p := range points {
		fmt.Fprintln(c.stdout, p)
	}
	return exitOK
}

// describeProcess names a process for a message: "process 1234 (tether
// recover)", from its command line, or "another process" when its pid is
// not known.
func describeProcess(pid int) string {
	if pid <= 0 {
		return "another process"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return fmt.Sprintf("process %d", pid)
	}
	args := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
	if len(args) > 0 {
		args[0] = filepath.Base(args[0])
	}
	cmdline := strings.Join(args, " ")
	if len(cmdline) > 80 {
		cmdline = cmdline[:77] + "..."
	}
	return fmt.Sprintf("process %d (%s)", pid, clikit.Printable(cmdline))
}
