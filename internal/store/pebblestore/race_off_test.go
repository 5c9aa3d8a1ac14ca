//go:build !race

package pebblestore

const raceOn = false
