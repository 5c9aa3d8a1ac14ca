package main

import (
	"fmt"
	"net"
)

// checkLoopback refuses a --debug-addr that is not on a loopback
// interface, naming the flag (the server refuses it too, naming its
// Config field).
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-addr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--debug-addr %q: must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT); the profiling endpoints have no authentication", addr)
}
