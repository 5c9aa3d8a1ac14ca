package delayq_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// BenchmarkSendBatchHTTP is the whole path of the HTTP batch-send target
// in one process (so one CPU profile covers it): 8 senders, batches of
// 100 random 256 B payloads due in an hour, a Client over loopback HTTP,
// the server, and the engine on a durable Pebble store — the shape of
// `delayq bench send --target serve:… --batch 100`.
func BenchmarkSendBatchHTTP(b *testing.B) {
	st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{Logger: quiet, BallastSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.Open(context.Background(), engine.Config{Store: st, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { eng.Close(context.Background()); st.Close() }()
	srv, err := httpapi.New(httpapi.Config{Queue: eng, Ready: eng.Ready, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	c, err := delayq.NewClient(ts.URL, delayq.WithHTTPClient(&http.Client{Transport: tr}), delayq.WithRetry(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	const senders, batch = 8, 100
	jobs := make(chan int)
	var wg sync.WaitGroup
	errc := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 1))
			reqs := make([]delayq.SendRequest, batch)
			for range jobs {
				at := time.Now().Add(time.Hour)
				for i := range reqs {
					p := make([]byte, 256)
					for j := range p {
						p[j] = byte(r.Uint32())
					}
					reqs[i] = delayq.SendRequest{Payload: p, When: delayq.When{DeliverAt: at}}
				}
				if _, err := c.SendBatch(context.Background(), "bench", reqs); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
}

// BenchmarkClientEncodeBatch is the client's share of a batch send before
// the request goes out: converting and encoding 100 messages of 256 B.
func BenchmarkClientEncodeBatch(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	reqs := make([]delayq.SendRequest, 100)
	at := time.Now().Add(time.Hour)
	for i := range reqs {
		p := make([]byte, 256)
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		reqs[i] = delayq.SendRequest{Payload: p, When: delayq.When{DeliverAt: at}}
	}
	for _, enc := range []struct {
		name string
		f    func([]delayq.SendRequest) ([]byte, error)
	}{{"append", delayq.EncodeSendBatchForTest}, {"json", delayq.EncodeSendBatchJSONForTest}} {
		b.Run(enc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := enc.f(reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
