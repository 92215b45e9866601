package main

import (
	"context"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

func (c *cli) cmdEvents(args []string) int {
	fs := c.flags("events")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("events takes one task id or name")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	var evs []fsm.Event
	info, err := c.resolve(ctx, s, fs.Arg(0))
	if err == nil {
		// A task whose executor has ended is reconciled first, so that
		// its log tells its end (stamped when it happened).
		info = c.reconcileIfGone(ctx, s, info)
		evs, err = s.svc.TaskEvents(ctx, info.ID)
	}
	c.closeSession(s)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		out := make([]clikit.EventJSON, 0, len(evs))
		for _, e := range evs {
			out = append(out, clikit.NewEventJSON(e))
		}
		return c.printJSON(out)
	}
	tab := clikit.NewEventTable(c.stdout)
	err = tab.Header()
	for _, e := range evs {
		if err == nil {
			err = tab.Line(e)
		}
	}
	if err != nil {
		return c.fail(err)
	}
	return exitOK
}
