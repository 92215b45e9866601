//go:build linux

package seccomp

const helperCensus = "seccomp-census"

func runCensus(args []string) int { return 2 }
