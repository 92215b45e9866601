package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/taskfile"
)

// firstArg is what run's and start's first argument is.
type firstArg uint8

const (
	argCommand  firstArg = iota // a command to run (a name looked up in PATH, or an executable)
	argTaskFile                 // a task file: .hcl, .nomad, or a file that parses as one
	argDataFile                 // an existing file that is neither: refused, with a hint
)

// maxSniff bounds how much of a file without a task file's extension is
// read to tell whether it is one.
const maxSniff = 1 << 20

// classifyFirst tells what run's or start's first argument names. A
// task file by its extension; else an existing regular file that is not
// executable is a task file when it parses as HCL with a task or job
// block at its top, and otherwise a file the user probably did not mean
// to run (`tether run README.md`); everything else is a command, which
// the executor looks up.
func classifyFirst(arg string) firstArg {
	if isTaskFile(arg) {
		return argTaskFile
	}
	fi, err := os.Stat(arg)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 != 0 {
		return argCommand
	}
	if sniffTaskFile(arg, fi.Size()) {
		return argTaskFile
	}
	return argDataFile
}

// sniffTaskFile reports whether the file at path is a task file by its
// form (taskfile.Sniff), reading at most maxSniff bytes of it.
func sniffTaskFile(path string, size int64) bool {
	if size > maxSniff {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxSniff))
	if err != nil {
		return false
	}
	return taskfile.Sniff(filepath.Base(path), src)
}

// taskLine is run's and start's rule for their command line: it starts
// after "--", or at a first argument that is not a task file (nor a file
// to refuse).
func taskLine(pos []string, next string, afterDash bool) bool {
	return afterDash || len(pos) == 0 && classifyFirst(next) == argCommand
}

// execLine is exec's: the command line starts after the task.
func execLine(pos []string, _ string, _ bool) bool { return len(pos) >= 1 }

// dataFileError is the refusal of a first argument that names a file
// that is neither executable nor a task file.
func dataFileError(name, arg string) string {
	return fmt.Sprintf("%s is not a task file (not .hcl or .nomad, and no task or job block in it) and not executable\n"+
		"  give a task file, or run it as a command with: tether %s -- %s", clikit.Printable(arg), name, clikit.Printable(arg))
}
