//go:build race

package mysqlstore_test

// raceOn: the package's tests run with the race detector.
const raceOn = true
