package sluice

// The test harness: a real `sluice serve` process on free loopback ports with a temp data
// directory (no mocks). The binary is SLUICE_BIN, else built with `cargo build -p sluice`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var sluiceBin string

func TestMain(m *testing.M) {
	sluiceBin = os.Getenv("SLUICE_BIN")
	if sluiceBin == "" {
		root, _ := filepath.Abs("../..")
		cmd := exec.Command("cargo", "build", "-p", "sluice")
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "sdk/go tests: `cargo build -p sluice` failed (%v); set SLUICE_BIN to a built sluice binary\n", err)
			os.Exit(2)
		}
		sluiceBin = filepath.Join(root, "target", "debug", "sluice")
	}
	if _, err := os.Stat(sluiceBin); err != nil {
		fmt.Fprintf(os.Stderr, "sdk/go tests: the sluice binary %s is missing: %v\n", sluiceBin, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// healthClient probes /healthz only; it does not check the certificate (TLS is tested with
// the SDK's own CA file handling).
var healthClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// freePort returns a loopback port free right now (TCP or UDP).
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testServer is one `sluice serve` (restartable on the same ports and data directory).
type testServer struct {
	t                          *testing.T
	data                       string
	httpPort, tcpPort, udpPort int
	extra                      []string
	cmd                        *exec.Cmd
	exited                     chan error // the process's Wait, once it ends
}

// newServer picks ports and a data directory; start runs it.
func newServer(t *testing.T, extra ...string) *testServer {
	t.Helper()
	s := &testServer{
		t: t, data: filepath.Join(t.TempDir(), "data"),
		httpPort: freePort(t, "tcp"), tcpPort: freePort(t, "tcp"), udpPort: freePort(t, "udp"), extra: extra,
	}
	t.Cleanup(s.stop)
	return s
}

// startServer starts a new server and waits until it answers.
func startServer(t *testing.T, extra ...string) *testServer {
	s := newServer(t, extra...)
	s.start()
	return s
}

func (s *testServer) URL() string     { return fmt.Sprintf("http://127.0.0.1:%d", s.httpPort) }
func (s *testServer) TCP() string     { return fmt.Sprintf("127.0.0.1:%d", s.tcpPort) }
func (s *testServer) UDP() string     { return fmt.Sprintf("127.0.0.1:%d", s.udpPort) }
func (s *testServer) logPath() string { return s.data + ".log" }

func (s *testServer) start() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	args := append([]string{"serve", "--data", s.data, "--http", fmt.Sprintf("127.0.0.1:%d", s.httpPort),
		"--tcp", s.TCP(), "--udp", s.UDP(), "--dc", "test"}, s.extra...)
	s.cmd = exec.Command(sluiceBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start sluice serve: %v", err)
	}
	logf.Close()
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(s.logPath())
			s.cmd = nil
			s.t.Fatalf("sluice serve exited (%v):\n%s", err, log)
		default:
		}
		resp, err := healthClient.Get(s.URL() + "/healthz")
		if err == nil && resp.StatusCode == 400 {
			// A TLS port answers plain HTTP with 400: ask over https (the probe only).
			resp.Body.Close()
			resp, err = healthClient.Get(strings.Replace(s.URL(), "http://", "https://", 1) + "/healthz")
		}
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				s.exited = exited
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sluice serve did not answer /healthz within 60 s (log %s)", s.logPath())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signal sends sig and waits for the process to end.
func (s *testServer) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// kill is a crash: SIGKILL.
func (s *testServer) kill() { s.signal(syscall.SIGKILL) }

// stop is a clean stop: SIGTERM (every open second is stored first).
func (s *testServer) stop() { s.signal(syscall.SIGTERM) }

// get returns a GET's body, failing the test unless it is 200.
func (s *testServer) get(path string, q url.Values) []byte {
	s.t.Helper()
	resp, err := http.Get(s.URL() + path + "?" + q.Encode())
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return body
}

// ids reads the `id` of every event of type typ (and subtype, when given) since from, straight
// from `GET /v1/events` (not through the SDK's Reader), counting each.
func (s *testServer) ids(typ, subtype string, from time.Time) map[int64]int {
	s.t.Helper()
	q := url.Values{"from": {fmt.Sprint(from.Unix() - 2)}, "type": {typ}}
	if subtype != "" {
		q.Set("subtype", subtype)
	}
	out := map[int64]int{}
	sc := bufio.NewScanner(bytes.NewReader(s.get("/v1/events", q)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 || bytes.HasPrefix(line, []byte(`{"_sluice"`)) {
			continue
		}
		var ev struct {
			ID *int64 `json:"id"`
		}
		if err := json.Unmarshal(line, &ev); err != nil || ev.ID == nil {
			s.t.Fatalf("an event without an id: %s", line)
		}
		out[*ev.ID]++
	}
	return out
}

// waitIDs polls until `want` distinct ids of typ/subtype are readable (stored after the grace),
// then returns the counts; fails after 60 s with what was found.
func (s *testServer) waitIDs(typ, subtype string, from time.Time, want int) map[int64]int {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := s.ids(typ, subtype, from)
		if len(got) >= want {
			// One more read after the last flush tick: a late duplicate would show now.
			time.Sleep(1500 * time.Millisecond)
			return s.ids(typ, subtype, from)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s/%s: %d of %d events readable after 60 s", typ, subtype, len(got), want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// token makes a token with `sluice token create` (through the running server's local secret).
func (s *testServer) token(name, scope string) string {
	s.t.Helper()
	out, err := exec.Command(sluiceBin, "token", "create", "--data", s.data, "--name", name, "--scope", scope).CombinedOutput()
	if err != nil {
		s.t.Fatalf("token create: %v\n%s", err, out)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "sluice_") {
			return f
		}
	}
	s.t.Fatalf("no secret in the output of token create: %s", out)
	return ""
}

// assertOnce checks ids 0..n-1 each appear exactly once.
func assertOnce(t *testing.T, what string, got map[int64]int, n int) {
	t.Helper()
	var missing, dup []int64
	for i := int64(0); i < int64(n); i++ {
		switch got[i] {
		case 0:
			missing = append(missing, i)
		case 1:
		default:
			dup = append(dup, i)
		}
	}
	extra := len(got) - (n - len(missing))
	if len(missing) > 0 || len(dup) > 0 || extra != 0 {
		t.Fatalf("%s: %d events expected once: %d missing (first %v), %d duplicated (first %v), %d unexpected ids",
			what, n, len(missing), head(missing), len(dup), head(dup), extra)
	}
}

func head(v []int64) []int64 {
	if len(v) > 10 {
		return v[:10]
	}
	return v
}

// closeEmitter closes with a generous deadline, failing the test on an error.
func closeEmitter(t *testing.T, e *Emitter, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("close: %v (stats %+v)", err, e.Stats())
	}
}
