package cluster

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/driver"
)

// DefaultPrefix is the key prefix of a fleet when none is configured.
const DefaultPrefix = "/tether/"

// Keys is the fleet's key layout under one prefix (see doc.go):
//
//	PREFIX alive/NODE              the node's liveness key, under its lease
//	PREFIX node/NODE               the node's status: up since, seen, mirror lag
//	PREFIX head/NODE/TASK          a task's mirrored head (seq, state, name)
//	PREFIX event/NODE/TASK/SEQ     one mirrored event; SEQ is 20 decimal digits
//	PREFIX desired/NODE/NAME       a task file the node is told to run
//	PREFIX info/NODE               the node's registration: fingerprint, meta, capacity, drivers
//	PREFIX job/JOB                 a placed job's head: its version, stopped or not
//	PREFIX jobspec/JOB/VERSION     the job's file and inputs at VERSION (20 digits), never changed
//	PREFIX alloc/JOB/GROUP/INDEX   a copy's placement: the node it is on, the version it runs
//	PREFIX place/NODE/JOB/GROUP/INDEX  the same placement, under the node it names
//	PREFIX verdict/NODE/JOB/GROUP/INDEX  the node's word on a copy placed on it
//	PREFIX standing/NODE/NAME      the node's word on a desired task
//	PREFIX eval/JOB                the scheduler's last word on the job: copies not placed, and why
//	PREFIX lost/NODE               a node the scheduler took copies from, and since when it is back
//	PREFIX leader/                 the scheduler's election (clientv3/concurrency)
//
// NODE is a validated node name, TASK a validated task id, JOB and GROUP
// validated by the task id rule and INDEX a decimal copy index, so no key
// part can hold a '/' or a raw task name.
type Keys struct{ prefix string }

// NewKeys returns the layout under prefix ("" is DefaultPrefix). A prefix
// starts and ends with '/' and is printable ASCII.
func NewKeys(prefix string) (Keys, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	ok := len(prefix) >= 2 && len(prefix) <= 256 && prefix[0] == '/' && prefix[len(prefix)-1] == '/'
	for i := 0; ok && i < len(prefix); i++ {
		ok = prefix[i] > ' ' && prefix[i] < 0x7f
	}
	if !ok {
		return Keys{}, fmt.Errorf("%w %q: use printable ASCII that starts and ends with '/', such as %q", ErrInvalidPrefix, prefix, DefaultPrefix)
	}
	return Keys{prefix: prefix}, nil
}

// Prefix returns the layout's prefix.
func (k Keys) Prefix() string { return k.prefix }

func (k Keys) alive(node string) string      { return k.prefix + "alive/" + node }
func (k Keys) alivePrefix() string           { return k.prefix + "alive/" }
func (k Keys) status(node string) string     { return k.prefix + "node/" + node }
func (k Keys) statusPrefix() string          { return k.prefix + "node/" }
func (k Keys) head(node, task string) string { return k.prefix + "head/" + node + "/" + task }

// headPrefix is the heads of node, or of every node for "".
func (k Keys) headPrefix(node string) string {
	if node == "" {
		return k.prefix + "head/"
	}
	return k.prefix + "head/" + node + "/"
}

func (k Keys) event(node, task string, seq uint64) string {
	return k.eventPrefix(node, task) + seqText(seq)
}

// eventPrefix is the events of one task, of every task of node for task
// "", or of every node for both "".
func (k Keys) eventPrefix(node, task string) string {
	switch {
	case node == "":
		return k.prefix + "event/"
	case task == "":
		return k.prefix + "event/" + node + "/"
	}
	return k.prefix + "event/" + node + "/" + task + "/"
}

func (k Keys) desired(node, name string) string { return k.desiredPrefix(node) + name }
func (k Keys) desiredPrefix(node string) string { return k.prefix + "desired/" + node + "/" }

func (k Keys) info(node string) string { return k.prefix + "info/" + node }
func (k Keys) infoPrefix() string      { return k.prefix + "info/" }
func (k Keys) job(job string) string   { return k.prefix + "job/" + job }
func (k Keys) jobPrefix() string       { return k.prefix + "job/" }
func (k Keys) jobSpec(job string, version uint64) string {
	return k.jobSpecPrefix(job) + seqText(version)
}
func (k Keys) jobSpecPrefix(job string) string { return k.prefix + "jobspec/" + job + "/" }

// CopyID names one copy of a placed job: its group's copy Index.
type CopyID struct {
	Job   string
	Group string
	Index int
}

func (c CopyID) String() string { return fmt.Sprintf("%s.%s[%d]", c.Job, c.Group, c.Index) }

func (c CopyID) path() string { return c.Job + "/" + c.Group + "/" + strconv.Itoa(c.Index) }

func (k Keys) alloc(c CopyID) string { return k.prefix + "alloc/" + c.path() }

// allocPrefix is the placements of job, or of every job for "".
func (k Keys) allocPrefix(job string) string {
	if job == "" {
		return k.prefix + "alloc/"
	}
	return k.prefix + "alloc/" + job + "/"
}

func (k Keys) place(node string, c CopyID) string { return k.placePrefix(node) + c.path() }

// placePrefix is what is placed on node: the prefix its agent watches.
func (k Keys) placePrefix(node string) string { return k.prefix + "place/" + node + "/" }

func (k Keys) verdict(node string, c CopyID) string { return k.verdictPrefix(node) + c.path() }

// verdictPrefix is node's verdicts, or every node's for "".
func (k Keys) verdictPrefix(node string) string {
	if node == "" {
		return k.prefix + "verdict/"
	}
	return k.prefix + "verdict/" + node + "/"
}

// standing is the node's word on a desired task (DesiredVerdict).
func (k Keys) standing(node, name string) string { return k.standingPrefix(node) + name }
func (k Keys) standingPrefix(node string) string { return k.prefix + "standing/" + node + "/" }

func (k Keys) eval(job string) string  { return k.prefix + "eval/" + job }
func (k Keys) evalPrefix() string      { return k.prefix + "eval/" }
func (k Keys) lost(node string) string { return k.prefix + "lost/" + node }
func (k Keys) lostPrefix() string      { return k.prefix + "lost/" }

// leaderPrefix is the scheduler's election prefix (without the trailing
// '/' that concurrency.NewElection adds).
func (k Keys) leaderPrefix() string { return k.prefix + "leader" }

// copyID reads the JOB/GROUP/INDEX parts of a placement or verdict key.
func copyID(parts []string) (CopyID, bool) {
	if len(parts) != 3 {
		return CopyID{}, false
	}
	i, err := strconv.Atoi(parts[2])
	if err != nil || i < 0 || strconv.Itoa(i) != parts[2] {
		return CopyID{}, false
	}
	return CopyID{Job: parts[0], Group: parts[1], Index: i}, true
}

// seqText is seq as 20 decimal digits, so that keys sort as numbers do.
func seqText(seq uint64) string {
	s := strconv.FormatUint(seq, 10)
	return strings.Repeat("0", 20-len(s)) + s
}

// split returns the parts of key after prefix+kind, split at '/', or nil
// if key is not of that kind or does not have n parts.
func (k Keys) split(key, kind string, n int) []string {
	rest, ok := strings.CutPrefix(key, k.prefix+kind)
	if !ok {
		return nil
	}
	parts := strings.Split(rest, "/")
	if len(parts) != n {
		return nil
	}
	return parts
}

// ValidateNodeName refuses a node name that breaks the task id rule
// (driver.ValidateTaskID): 1 to 63 of [A-Za-z0-9_.-], starting with a
// letter or digit. A node name is a key part and a file name.
func ValidateNodeName(node string) error {
	if driver.ValidateTaskID(node) != nil {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit (the rule for task ids)", ErrInvalidNode, node)
	}
	return nil
}

// ValidateJobName refuses a job or group name that breaks the task id
// rule: it is a key part.
func ValidateJobName(what, name string) error {
	if driver.ValidateTaskID(name) != nil {
		return fmt.Errorf("%w: %s %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit (the name is a key in etcd)", ErrInvalidJob, what, name)
	}
	return nil
}

// ValidateName refuses a desired task name that breaks the task id rule.
func ValidateName(name string) error {
	if driver.ValidateTaskID(name) != nil {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}
