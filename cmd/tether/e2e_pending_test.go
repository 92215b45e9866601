//go:build !withexec

package main

// buildTags are the tags the binary under test is built with: the same as
// this test's (the executor is behind withexec until it lands).
const buildTags = ""
