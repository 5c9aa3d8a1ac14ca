// Command kfakebroker serves franz-go's kfake, an in-process Kafka
// implementation, as a single broker process on a port of your choice,
// for `delayq bench forward --kafka` where no Kafka is installed (Debian
// packages none). With --dir its log is kept on disk and reloaded at
// start; with --sync every produce is fsync'd before it is acknowledged.
// It speaks the protocol delayq's Kafka target uses; its speed is not a
// real Kafka's.
//
//	go run ./cmd/kfakebroker --port 19092 --dir /tmp/kfake --sync
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 19092, "loopback port to listen on")
	dir := flag.String("dir", "", "keep the log in this directory (reloaded at start); empty: memory only")
	sync := flag.Bool("sync", false, "fsync every produce before acknowledging it")
	flag.Parse()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port), kfake.AllowAutoTopicCreation()}
	if *dir != "" {
		opts = append(opts, kfake.DataDir(*dir))
	}
	if *sync {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
	fmt.Println(c.ListenAddrs()[0])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close()
}
