//go:build !race

package mysqlstore_test

const raceOn = false
