package sluice

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Over TLS (the server's self-signed certificate as the CA file): HTTP and TCP emitters and the
// reader, with a token under --auth.
func TestTLSWithACAFileAndAToken(t *testing.T) {
	srv := startServer(t, "--tls-self-signed", "--auth")
	ca := filepath.Join(srv.data, "tls", "self-signed.pem")
	tok := srv.token("gotls", "ingest,read")
	https := strings.Replace(srv.URL(), "http://", "https://", 1)
	start := time.Now()

	for k, cfg := range []EmitterConfig{
		{HTTP: https, CAFile: ca, Token: tok},
		{TCP: "tls://" + srv.TCP(), CAFile: ca, Token: tok},
	} {
		e, err := NewEmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			e.Emit(Event{"type": "GOSDK", "subtype": "tls", "id": 20*k + i})
		}
		closeEmitter(t, e, 30*time.Second)
		if st := e.Stats(); st.Sent != 20 {
			t.Fatalf("%+v: stats %+v", cfg, st)
		}
	}
	// Without the CA the certificate is not trusted: never delivered.
	e, err := NewEmitter(EmitterConfig{HTTP: https, Token: tok, RetryBudget: 500 * time.Millisecond, OnError: func(string, int) {}})
	if err != nil {
		t.Fatal(err)
	}
	e.Emit(Event{"type": "GOSDK", "subtype": "tls", "id": 999})
	closeEmitter(t, e, 30*time.Second)
	if st := e.Stats(); st.Sent != 0 || st.DroppedRetryBudget != 1 {
		t.Fatalf("without the CA: %+v", st)
	}

	r, err := NewReader(ReaderConfig{Server: https, CAFile: ca, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := 0
		it, err := r.Range(context.Background(), start.Add(-2*time.Second), time.Time{}, Query{Type: "GOSDK", Subtype: "tls"})
		if err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			n++
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		if n == 40 {
			break
		}
		if n > 40 || time.Now().After(deadline) {
			t.Fatalf("read %d events over TLS, want 40", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
