package pebblestore

import (
	"runtime"
	"slices"
)

func slicesSort(s []string) { slices.Sort(s) }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
