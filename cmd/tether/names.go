package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/internal/clikit"
)

// resolve turns an id or a task name into a task, by the name rules of
// driver.Resolve: a name stands for its one live task, else its most
// recent one.
func (c *cli) resolve(ctx context.Context, s *session, arg string) (driver.TaskInfo, error) {
	return s.svc.Resolve(ctx, arg)
}

// nameTaken reports a start (or the restart of an ended task) refused
// because a task of its name is live, with what to do about it, and
// returns exitStartFail.
func (c *cli) nameTaken(err error, restart bool) int {
	var ne *driver.NameError
	if !errors.As(err, &ne) || len(ne.Tasks) == 0 {
		return c.fail(err)
	}
	now := time.Now()
	var live []string
	for _, t := range ne.Tasks {
		live = append(live, fmt.Sprintf("%s (%s since %s)", t.ID, t.State, clikit.Ago(now, t.UpdatedAt)))
	}
	c.errorf("a task named %s is live: %s; nothing was started", clikit.Printable(ne.Name), strings.Join(live, ", "))
	newest := ne.Tasks[len(ne.Tasks)-1].ID
	if restart {
		fmt.Fprintf(c.stderr, "  restart that one (tether restart %s), or stop it first\n", newest)
	} else {
		fmt.Fprintf(c.stderr, "  stop it first (tether stop %s), or give --replace to stop it and start this one\n", newest)
	}
	return exitStartFail
}
