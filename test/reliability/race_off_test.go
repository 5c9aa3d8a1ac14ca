//go:build !race

package reliability

// raceOn: see race_on_test.go.
const raceOn = false
