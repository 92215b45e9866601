//go:build !withexec

package main

// buildTags are the tags the binary under test is built with: the same as
// this test's (the driver's real executor world is behind withexec
// until it lands; delete this file and the tag of e2e_exec_test.go then).
const buildTags = ""
