package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tether-fsm/tether/driver"
)

// resolve turns an id or a task name into a task, by the name rules of
// driver.Resolve: a name stands for its one live task, else its most
// recent one.
func (c *cli) resolve(ctx context.Context, s *session, arg string) (driver.TaskInfo, error) {
	return s.d.Resolve(ctx, arg)
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
		live = append(live, fmt.Sprintf("%s (%s since %s)", t.ID, t.State, ago(now, t.UpdatedAt)))
	}
	c.errorf("a task named %s is live: %s; nothing was started", printable(ne.Name), strings.Join(live, ", "))
	newest := ne.Tasks[len(ne.Tasks)-1].ID
	if restart {
		fmt.Fprintf(c.stderr, "  restart that one (tether restart %s), or stop it first\n", newest)
	} else {
		fmt.Fprintf(c.stderr, "  stop it first (tether stop %s), or give --replace to stop it and start this one\n", newest)
	}
	return exitStartFail
}

// packagePrefix matches the package prefix of a wrapped error's message
// ("driver: ", "executor: "): named errors carry one (STYLE.md), and a
// person reading the CLI's message has no use for it.
var packagePrefix = regexp.MustCompile(`(^|: |; |\(|\n)(?:fsm|driver|executor|store|statedir|cgroup|logs|seccomp|taskfile|taskdir|template|artifact): `)

// userText is a message without the package prefixes of the errors in it.
func userText(msg string) string {
	return packagePrefix.ReplaceAllString(msg, "$1")
}

// ago says how long ago a Unix-ns time was, in a unit a person reads.
func ago(now time.Time, unixNano int64) string {
	if unixNano == 0 {
		return "-"
	}
	return span(now.Sub(time.Unix(0, unixNano))) + " ago"
}

// span says a duration in one or two units: 45s, 3m12s, 5h3m, 2d4h.
func span(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours()/24), int(d.Hours())%24)
}
