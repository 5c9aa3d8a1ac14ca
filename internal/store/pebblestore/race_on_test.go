//go:build race

package pebblestore

// raceOn: the tests run with the race detector.
const raceOn = true
