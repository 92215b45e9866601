package main

// The files the executor writes the task's output to, in the task's
// directory (<state-dir>/tasks/<id>).
const (
	stdoutFile = "stdout"
	stderrFile = "stderr"
)
