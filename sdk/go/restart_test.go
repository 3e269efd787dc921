package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// steadyEmit emits {"type":"GOSDK","subtype":subtype,"id":i} every interval until stop is
// closed, and returns how many it emitted (every one must have been accepted by Emit).
func steadyEmit(t *testing.T, e *Emitter, subtype string, interval time.Duration, stop <-chan struct{}) int {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-tick.C:
			if !e.Emit(Event{"type": "GOSDK", "subtype": subtype, "id": n}) {
				t.Errorf("%s: Emit %d refused: %+v", subtype, n, e.Stats())
				return n
			}
			n++
		}
	}
}

// The server is SIGKILLed under a steady emitter (200 events/s over HTTP, over TCP, and over
// HTTP through a disk buffer) and
// restarted 20 s later on the same data directory and ports: every event is stored exactly once,
// and a tail that followed the whole time saw each once too.
func TestServerKilledAndRestartedUnderASteadyEmitterLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("the restart test takes ~35 s (not with -short)")
	}
	srv := startServer(t)
	start := time.Now()
	transports := map[string]EmitterConfig{
		"restart_http": {HTTP: srv.URL(), OnError: func(string, int) {}},
		"restart_tcp":  {TCP: srv.TCP(), OnError: func(string, int) {}},
		// Through the disk buffer: the same guarantee, with the outage held on disk.
		"restart_buffer": {HTTP: srv.URL(), BufferDir: t.TempDir(), OnError: func(string, int) {}},
	}
	emitters := map[string]*Emitter{}
	for name, cfg := range transports {
		e, err := NewEmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		emitters[name] = e
	}

	// A tail on the HTTP emitter's events, reconnecting through the outage from its cursor.
	r, err := NewReader(ReaderConfig{Server: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tailCtx, stopTail := context.WithCancel(context.Background())
	defer stopTail()
	tailSeen := map[int64]int{}
	var tailMu sync.Mutex
	tailDone := make(chan error, 1)
	go func() {
		tail := r.Tail(tailCtx, TailOptions{Query: Query{Type: "GOSDK", Subtype: "restart_http"}, From: start.Add(-2 * time.Second)}, "")
		for tail.Next() {
			id, err := tail.Event()["id"].(interface{ Int64() (int64, error) }).Int64()
			if err != nil {
				tailDone <- err
				return
			}
			tailMu.Lock()
			tailSeen[id]++
			tailMu.Unlock()
		}
		tailDone <- tail.Err()
	}()

	stop := make(chan struct{})
	counts := map[string]int{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, e := range emitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := steadyEmit(t, e, name, 5*time.Millisecond, stop)
			mu.Lock()
			counts[name] = n
			mu.Unlock()
		}()
	}
	time.Sleep(5 * time.Second)
	srv.kill()
	time.Sleep(20 * time.Second)
	srv.start()
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()

	for name, e := range emitters {
		closeEmitter(t, e, 150*time.Second)
		st := e.Stats()
		if st.Sent != int64(counts[name]) || st.Queued != 0 || st.DroppedRetryBudget != 0 || st.DroppedQueueFull != 0 || st.Rejected != 0 {
			t.Errorf("%s: %d emitted, stats %+v", name, counts[name], st)
		}
		if st.Retries == 0 {
			t.Errorf("%s: no retries: the outage was not seen (%+v)", name, st)
		}
		t.Logf("%s: %d events, %d retries, %d send errors", name, counts[name], st.Retries, st.SendErrors)
	}
	for name := range emitters {
		assertOnce(t, name, srv.waitIDs("GOSDK", name, start, counts[name]), counts[name])
	}

	deadline := time.Now().Add(60 * time.Second)
	for {
		tailMu.Lock()
		n := len(tailSeen)
		tailMu.Unlock()
		if n >= counts["restart_http"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopTail()
	if err := <-tailDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("tail: %v", err)
	}
	assertOnce(t, "the tail across the restart", tailSeen, counts["restart_http"])
}

// The disk buffer outlives the emitter: a first Emitter, with the server down, closes with its
// events in the buffer; a second one on the same directory sends them (once), before its own.
func TestDiskBufferSurvivesTheEmittersRestart(t *testing.T) {
	srv := newServer(t) // not started yet: the server is down
	dir := t.TempDir()
	cfg := EmitterConfig{HTTP: srv.URL(), BufferDir: dir, OnError: func(string, int) {}}
	e1, err := NewEmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 300; i++ {
		if !e1.Emit(Event{"type": "GOSDK", "subtype": "buffer", "id": i}) {
			t.Fatalf("Emit %d refused", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e1.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with the server down: %v", err)
	}
	if st := e1.Stats(); st.Buffered != 300 || st.Sent != 0 || st.Queued != 300 || st.Undelivered != 0 {
		t.Fatalf("first emitter: %+v", st)
	}

	srv.start()
	e2, err := NewEmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if q := e2.Stats().Queued; q != 300 {
		t.Fatalf("the second emitter found %d events in the buffer, want 300", q)
	}
	for i := 300; i < 400; i++ {
		e2.Emit(Event{"type": "GOSDK", "subtype": "buffer", "id": i})
	}
	closeEmitter(t, e2, 60*time.Second)
	if st := e2.Stats(); st.Sent != 400 || st.Queued != 0 {
		t.Fatalf("second emitter: %+v", st)
	}
	assertOnce(t, "buffer", srv.waitIDs("GOSDK", "buffer", start, 400), 400)
	// Nothing is left to send: a third emitter finds the buffer empty.
	buf, unsent, err := openBuffer(dir, 1<<30)
	if err != nil || unsent != 0 {
		t.Fatalf("buffer after delivery: %d unsent, %v", unsent, err)
	}
	// One emitter per directory: a second one is refused while the first holds it.
	if _, err := NewEmitter(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second emitter on a buffer in use: %v", err)
	}
	buf.close()
}

// A buffer at its cap drops (reason buffer_full) instead of growing.
func TestDiskBufferCapDropsBeyondIt(t *testing.T) {
	srv := newServer(t) // down: everything stays in the buffer
	e, err := NewEmitter(EmitterConfig{HTTP: srv.URL(), BufferDir: t.TempDir(), BufferMaxBytes: 4096, OnError: func(string, int) {}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		e.Emit(Event{"type": "GOSDK", "id": i, "pad": fmt.Sprintf("%040d", i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.Close(ctx)
	st := e.Stats()
	if st.DroppedBufferFull == 0 || st.Buffered+st.DroppedBufferFull != 200 || st.Buffered*70 > 4096 {
		t.Fatalf("stats %+v", st)
	}
}
