package sluice

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Each transport delivers every event once, read back through the SDK's Reader too.
func TestEmitOverEachTransportReadsBackEveryEventOnce(t *testing.T) {
	srv := startServer(t)
	start := time.Now()
	const n = 600
	for _, tr := range []string{"udp", "tcp", "http"} {
		cfg := EmitterConfig{BatchSize: 100}
		switch tr {
		case "udp":
			cfg.UDP = srv.UDP()
		case "tcp":
			cfg.TCP = srv.TCP()
		case "http":
			cfg.HTTP = srv.URL()
		}
		e, err := NewEmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if !e.Emit(Event{"type": "GOSDK", "subtype": tr, "id": i, "path": "/x"}) {
				t.Fatalf("%s: Emit %d refused: %+v", tr, i, e.Stats())
			}
		}
		closeEmitter(t, e, 30*time.Second)
		st := e.Stats()
		if st.Sent != n || st.Emitted != n || st.Queued != 0 {
			t.Fatalf("%s: stats %+v", tr, st)
		}
		assertOnce(t, tr, srv.waitIDs("GOSDK", tr, start, n), n)
	}

	r, err := NewReader(ReaderConfig{Server: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	events, err := r.Range(context.Background(), start.Add(-2*time.Second), time.Time{}, Query{Type: "GOSDK", Subtype: "http"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for ev, err := range events.All() {
		if err != nil {
			t.Fatal(err)
		}
		id, err := ev["id"].(interface{ Int64() (int64, error) }).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if ev["type"] != "GOSDK" || ev["dc"] != "test" || ev["subtype"] != "http" {
			t.Fatalf("tags: %v", ev)
		}
		seen[id]++
	}
	assertOnce(t, "Reader.Range", seen, n)
}

// A full queue drops at once (Emit never blocks) and counts the drops.
func TestEmitNeverBlocksAndCountsAFullQueue(t *testing.T) {
	// A server not started: every send is refused, the first batch waits in its backoff.
	srv := newServer(t)
	e, err := NewEmitter(EmitterConfig{TCP: srv.TCP(), MaxQueue: 10, BatchSize: 5, Timeout: time.Second, RetryBudget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i := 0; i < 1000; i++ {
		if e.Emit(Event{"type": "GOSDK", "id": i}) {
			accepted++
		}
	}
	st := e.Stats()
	if st.DroppedQueueFull != int64(1000-accepted) || accepted > 20 || accepted < 10 {
		t.Fatalf("accepted %d, stats %+v", accepted, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with the server down: %v", err)
	}
	if st := e.Stats(); st.Undelivered+st.DroppedRetryBudget != int64(accepted) || st.Queued != 0 {
		t.Fatalf("after close: %+v", st)
	}
	if e.Emit(Event{"type": "GOSDK"}) || e.Stats().DroppedClosed != 1 {
		t.Fatal("Emit after Close must drop")
	}
}

// Events without a type are refused at Emit.
func TestEmitRefusesAnEventWithoutType(t *testing.T) {
	e, err := NewEmitter(EmitterConfig{UDP: "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if e.Emit(Event{"x": 1}) || e.Emit(Event{"type": 3}) || e.Stats().Invalid != 2 {
		t.Fatalf("stats %+v", e.Stats())
	}
	if _, err := NewEmitter(EmitterConfig{}); err == nil {
		t.Fatal("no transport must be an error")
	}
	if _, err := NewEmitter(EmitterConfig{HTTP: "127.0.0.1:8180"}); err == nil {
		t.Fatal("a URL without a scheme must be an error")
	}
}

// Emit is safe from many goroutines.
func TestEmitFromManyGoroutines(t *testing.T) {
	srv := startServer(t)
	start := time.Now()
	e, err := NewEmitter(EmitterConfig{HTTP: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				e.Emit(Event{"type": "GOSDK", "subtype": "conc", "id": g*250 + i})
			}
		}(g)
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	closeEmitter(t, e, 30*time.Second)
	assertOnce(t, "concurrent", srv.waitIDs("GOSDK", "conc", start, 2000), 2000)
}

// BenchmarkEmit is the caller's cost of Emit (encode + queue) for a small event; the sender
// runs meanwhile (UDP to a port nobody reads). `go test -run X -bench Emit`.
func BenchmarkEmit(b *testing.B) {
	e, err := NewEmitter(EmitterConfig{UDP: "127.0.0.1:9", MaxQueue: 1 << 20, OnError: func(string, int) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	ev := Event{"type": "WEB", "subtype": "request", "path": "/search", "status": 200, "ms": 12.5}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Emit(ev)
	}
}
