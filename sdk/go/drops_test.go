package sluice

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// skipWithoutDropsEndpoint skips when the server has no `POST /v1/drops` yet (the server part
// of the drops contract lands separately).
func skipWithoutDropsEndpoint(t *testing.T, srv *testServer) {
	t.Helper()
	resp, err := http.Post(srv.URL()+"/v1/drops", "application/json", strings.NewReader(`{"drops":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		t.Skipf("SKIPPED: this sluice server has no POST /v1/drops yet (answered %d): client drop reports cannot be checked", resp.StatusCode)
	}
}

// clientDrops reads `GET /v1/counts` for one second and returns the `client:*` drops of
// (type, subtype) there.
func clientDrops(t *testing.T, srv *testServer, epoch int64, typ, subtype string) map[string]int64 {
	t.Helper()
	body := srv.get("/v1/counts", url.Values{"from": {fmt.Sprint(epoch)}, "to": {fmt.Sprint(epoch + 1)}, "dc": {"test"}})
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line struct {
			Type    string           `json:"type"`
			Subtype string           `json:"subtype"`
			Dropped map[string]int64 `json:"dropped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("counts line %q: %v", sc.Text(), err)
		}
		if line.Type != typ || line.Subtype != subtype {
			continue
		}
		for reason, n := range line.Dropped {
			if strings.HasPrefix(reason, "client:") {
				out[reason] += n
			}
		}
	}
	return out
}

// waitClientDrops waits until the counts of (epoch, GOSDK, subtype) show want drops of reason
// (the server adds reported drops to its counts with its next flush tick), then checks no more
// come.
func waitClientDrops(t *testing.T, srv *testServer, epoch int64, subtype, reason string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := clientDrops(t, srv, epoch, "GOSDK", subtype)
		if got[reason] > want {
			t.Fatalf("counts show %v, want %s %d", got, reason, want)
		}
		if got[reason] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts show %v after 30 s, want %s %d", got, reason, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Drops are reported to the server and show in its completeness counts as client:<reason>:
// queue_full (while the server is up), retry_budget (reported once the server answers again).
func TestDropsAreReportedToTheServersCounts(t *testing.T) {
	srv := startServer(t)
	skipWithoutDropsEndpoint(t, srv)
	epoch := time.Now().Unix() - 5

	// queue_full: a tiny queue and a tight loop.
	e, err := NewEmitter(EmitterConfig{HTTP: srv.URL(), MaxQueue: 5, BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		e.Emit(Event{"type": "GOSDK", "subtype": "drops", "epoch": epoch, "id": i})
	}
	closeEmitter(t, e, 30*time.Second)
	st := e.Stats()
	if st.DroppedQueueFull == 0 || st.DropsReported != st.DroppedQueueFull || st.Sent+st.DroppedQueueFull != 5000 {
		t.Fatalf("queue_full: %+v", st)
	}
	waitClientDrops(t, srv, epoch, "drops", "client:queue_full", st.DroppedQueueFull)

	// retry_budget: a server down for longer than the budget, then back.
	down := newServer(t)
	e, err = NewEmitter(EmitterConfig{HTTP: down.URL(), RetryBudget: time.Second, OnError: func(string, int) {}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		e.Emit(Event{"type": "GOSDK", "subtype": "budget", "epoch": epoch, "id": i})
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.Stats().DroppedRetryBudget < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("not dropped after the budget: %+v", e.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	down.start()
	e.Emit(Event{"type": "GOSDK", "subtype": "budget", "epoch": epoch, "id": 10})
	closeEmitter(t, e, 30*time.Second)
	if st := e.Stats(); st.DropsReported != 10 || st.Sent != 1 {
		t.Fatalf("retry_budget: %+v", st)
	}
	waitClientDrops(t, down, epoch, "budget", "client:retry_budget", 10)
}
