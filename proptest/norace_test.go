//go:build !race

package proptest

// raceDetector: this test binary was built with -race.
const raceDetector = false
