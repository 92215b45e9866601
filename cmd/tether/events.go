package main

import (
	"context"
	"fmt"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// cmdEvents prints the event history of tasks: one task's as a table; with
// several (several names, or a group's or a job's), each task's table
// under a line naming it, in the order of the arguments, a blank line
// between them. --json prints one array of every event, each with its
// task's id. The exit code is the worst: 1 if any name stands for nothing.
func (c *cli) cmdEvents(args []string) int {
	fs := c.flags("events")
	asJSON := fs.Bool("json", false, "print a JSON array (every event with its task's id)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		c.errorf("events takes task ids or names (a group's JOB.GROUP, a job's name): tether events NAME...")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	code := exitOK
	type history struct {
		info driver.TaskInfo
		evs  []fsm.Event
	}
	var hs []history
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, fs.Args()) {
		if t.err != nil {
			code = worst(code, c.fail(t.err))
			continue
		}
		for _, info := range t.tasks {
			if seen[info.ID] {
				continue
			}
			seen[info.ID] = true
			// A task whose executor has ended is reconciled first, so
			// that its log tells its end (stamped when it happened).
			info = c.reconcileIfGone(ctx, s, info)
			evs, err := s.svc.TaskEvents(ctx, info.ID)
			if err != nil {
				code = worst(code, c.fail(err))
				continue
			}
			hs = append(hs, history{info, evs})
		}
	}
	c.closeSession(s)
	if *asJSON {
		out := []clikit.TaskEventJSON{}
		for _, h := range hs {
			for _, e := range h.evs {
				out = append(out, clikit.TaskEventJSON{Task: h.info.ID, EventJSON: clikit.NewEventJSON(e)})
			}
		}
		return worst(code, c.printJSON(out))
	}
	tab := clikit.NewEventTable(c.stdout)
	for i, h := range hs {
		if len(hs) > 1 {
			if i > 0 {
				fmt.Fprintln(c.stdout)
			}
			name := ""
			if h.info.Spec != nil {
				name = " (" + clikit.Printable(h.info.Spec.Name) + ")"
			}
			fmt.Fprintf(c.stdout, "==> %s%s <==\n", h.info.ID, name)
		}
		err := tab.Header()
		for _, e := range h.evs {
			if err == nil {
				err = tab.Line(e)
			}
		}
		if err != nil {
			return worst(code, c.fail(err))
		}
	}
	return code
}
