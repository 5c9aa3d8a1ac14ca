//go:build race

package reliability

// raceOn: the test binary runs with the race detector (scripts/test.sh,
// which runs every package at once): timing bounds are reported there,
// not judged.
const raceOn = true
