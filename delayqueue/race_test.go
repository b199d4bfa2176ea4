//go:build race

package delayqueue

// raceDetector reports whether the tests run under the race detector,
// which slows the handlers (not the queue) several times over.
const raceDetector = true
