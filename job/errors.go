package job

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of reading a file.
var (
	// ErrParse is wrapped by *ParseError: the file (or a var file) does not
	// parse, or a variable or the dispatch meta is missing or bad.
	ErrParse = errors.New("job: not a valid task file")
	// ErrNothingToRun: no group of the file is one tether can run (each is
	// named with why).
	ErrNothingToRun = errors.New("job: nothing tether can run")
	// ErrBadInput: an input is malformed (a -var without '=', an
	// override that does not apply).
	ErrBadInput = errors.New("job: bad input")
)

// Errors of the node's policy.
var (
	// ErrNotAllowed: the file asks for what the node's allow lists do not
	// allow (a template or a local artifact read from a host directory
	// outside --allow-read). The error names the flag that would allow it.
	ErrNotAllowed = errors.New("job: not allowed by the node's policy")
)

// Errors of instantiating.
var (
	// ErrShape: the ids given to Instantiate do not fit the job's shapes.
	ErrShape = errors.New("job: ids do not fit the job's allocations")
)

// ParseError is a file that does not parse: the parser's diagnostics,
// one line each (file:line,col: severity: summary: detail).
type ParseError struct {
	File  string
	Lines []string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s is not a valid task file: %s", e.File, strings.Join(e.Lines, "; "))
}

func (e *ParseError) Unwrap() error { return ErrParse }

// Describe is an error of Read as a person reads it: a parse error's
// diagnostics after the file's name, and the other errors of this package
// without the sentinel's words that start them ("job: nothing tether can
// run: "), which the rest of the message says better. Every source of a
// file says a refusal in these words (tether start, enable, the agent's
// status of its config dir and its etcd specs).
func Describe(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, s := range []error{ErrNothingToRun, ErrBadInput, ErrNotAllowed, ErrShape} {
		if errors.Is(err, s) {
			msg = strings.TrimPrefix(msg, s.Error()+": ")
		}
	}
	return msg
}
