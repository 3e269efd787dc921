package sluice

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"
)

// emitHTTP sends events and waits for them to be readable.
func emitHTTP(t *testing.T, srv *testServer, token string, events []Event) {
	t.Helper()
	e, err := NewEmitter(EmitterConfig{HTTP: srv.URL(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		e.Emit(ev)
	}
	closeEmitter(t, e, 30*time.Second)
	if st := e.Stats(); st.Sent != int64(len(events)) {
		t.Fatalf("stats %+v", st)
	}
}

func idOf(t *testing.T, ev Event) int64 {
	t.Helper()
	n, ok := ev["id"].(interface{ Int64() (int64, error) })
	if !ok {
		t.Fatalf("no id in %v", ev)
	}
	id, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Where and Select are the server's: only matching events, only the selected paths.
func TestRangeWithWhereAndSelect(t *testing.T) {
	srv := startServer(t)
	start := time.Now()
	var events []Event
	for i := 0; i < 100; i++ {
		status := 200
		if i%10 == 0 {
			status = 500
		}
		events = append(events, Event{"type": "GOSDK", "subtype": "ws", "id": i, "status": status, "path": "/p", "t": map[string]any{"ms": i}})
	}
	emitHTTP(t, srv, "", events)
	srv.waitIDs("GOSDK", "ws", start, 100)

	r, err := NewReader(ReaderConfig{Server: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Range(context.Background(), start.Add(-2*time.Second), time.Now().Add(time.Second),
		Query{Type: "GOSDK", Subtype: "ws", Where: "status >= 500", Select: []string{"id", "t.ms"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for it.Next() {
		ev := it.Event()
		keys := make([]string, 0, len(ev))
		for k := range ev {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, []string{"id", "t.ms"}) {
			t.Fatalf("selected paths: %v", ev)
		}
		ids = append(ids, idOf(t, ev))
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	if !slices.Equal(ids, []int64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}) {
		t.Fatalf("where status >= 500: %v", ids)
	}

	// A bad where is the server's 400, with its message.
	_, err = r.Range(context.Background(), start, time.Time{}, Query{Where: "status >="})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 400 || se.Message == "" {
		t.Fatalf("bad where: %v", err)
	}
}

// A tail resumed from its cursor continues exactly after it: no duplicate, no gap.
func TestTailResumesFromItsCursorWithoutDuplicates(t *testing.T) {
	srv := startServer(t)
	start := time.Now()
	first := make([]Event, 100)
	for i := range first {
		first[i] = Event{"type": "GOSDK", "subtype": "tail", "id": i}
	}
	emitHTTP(t, srv, "", first)
	srv.waitIDs("GOSDK", "tail", start, 100)

	r, err := NewReader(ReaderConfig{Server: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int64]int{}
	tail := r.Tail(ctx, TailOptions{Query: Query{Type: "GOSDK", Subtype: "tail"}, From: start.Add(-2 * time.Second)}, "")
	for len(seen) < 100 && tail.Next() {
		seen[idOf(t, tail.Event())]++
	}
	if tail.Err() != nil {
		t.Fatal(tail.Err())
	}
	// All 100 were returned: the last batch ended, so its cursor covers them.
	cursor := tail.Cursor()
	tail.Close()
	if cursor == "" {
		t.Fatal("no cursor after 100 events")
	}

	second := make([]Event, 100)
	for i := range second {
		second[i] = Event{"type": "GOSDK", "subtype": "tail", "id": 100 + i}
	}
	emitHTTP(t, srv, "", second)
	resumed := r.Tail(ctx, TailOptions{Query: Query{Type: "GOSDK", Subtype: "tail"}}, cursor)
	for len(seen) < 200 && resumed.Next() {
		id := idOf(t, resumed.Event())
		if id < 100 {
			t.Fatalf("the resumed tail repeated event %d", id)
		}
		seen[id]++
	}
	if resumed.Err() != nil {
		t.Fatal(resumed.Err())
	}
	resumed.Close()
	assertOnce(t, "tail", seen, 200)
}

// With --auth, a token is required to send and to read; the SDK carries it.
func TestTokenRequiredWhenConfigured(t *testing.T) {
	srv := startServer(t, "--auth")
	start := time.Now()
	tok := srv.token("gosdk", "ingest,read")

	for _, tr := range []string{"tcp", "http"} {
		cfg := EmitterConfig{TCP: srv.TCP(), RetryBudget: 2 * time.Second, OnError: func(string, int) {}}
		if tr == "http" {
			cfg = EmitterConfig{HTTP: srv.URL(), RetryBudget: 2 * time.Second, OnError: func(string, int) {}}
		}
		// No token: refused for the credentials, not retried.
		e, err := NewEmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.Emit(Event{"type": "GOSDK", "subtype": "auth" + tr, "id": -1})
		closeEmitter(t, e, 30*time.Second)
		if st := e.Stats(); st.Unauthorized != 1 || st.Sent != 0 || st.Retries != 0 {
			t.Fatalf("%s without a token: %+v", tr, st)
		}
		// With the token: delivered.
		cfg.Token = tok
		e, err = NewEmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			e.Emit(Event{"type": "GOSDK", "subtype": "auth" + tr, "id": i})
		}
		closeEmitter(t, e, 30*time.Second)
		if st := e.Stats(); st.Sent != 50 || st.Unauthorized != 0 {
			t.Fatalf("%s with the token: %+v", tr, st)
		}
	}

	noToken, _ := NewReader(ReaderConfig{Server: srv.URL()})
	_, err := noToken.Range(context.Background(), start.Add(-2*time.Second), time.Time{}, Query{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 401 {
		t.Fatalf("read without a token: %v", err)
	}
	tail := noToken.Tail(context.Background(), TailOptions{}, "")
	if tail.Next() || !errors.As(tail.Err(), &se) || se.Status != 401 {
		t.Fatalf("tail without a token: %v", tail.Err())
	}

	r, _ := NewReader(ReaderConfig{Server: srv.URL(), Token: tok})
	for _, tr := range []string{"tcp", "http"} {
		seen := map[int64]int{}
		deadline := time.Now().Add(60 * time.Second)
		for len(seen) < 50 && time.Now().Before(deadline) {
			seen = map[int64]int{}
			it, err := r.Range(context.Background(), start.Add(-2*time.Second), time.Time{}, Query{Type: "GOSDK", Subtype: "auth" + tr})
			if err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				seen[idOf(t, it.Event())]++
			}
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
			time.Sleep(200 * time.Millisecond)
		}
		assertOnce(t, "auth "+tr, seen, 50)
	}
}
