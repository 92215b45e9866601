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
//
// NODE is a validated node name and TASK a validated task id, so no key
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

// ValidateName refuses a desired task name that breaks the task id rule.
func ValidateName(name string) error {
	if driver.ValidateTaskID(name) != nil {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}
