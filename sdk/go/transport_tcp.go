package sluice

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// tcpSender writes each payload as one JSON-array line and reads its reply line
// (`ok <accepted> <dropped>` once durable, or `error <reason> …`).
type tcpSender struct {
	addr   string
	tls    *tls.Config // nil: plain TCP
	token  string
	cfg    *EmitterConfig
	conn   net.Conn
	reader *bufio.Reader
}

func (s *tcpSender) connect(ctx context.Context) error {
	d := net.Dialer{Timeout: s.cfg.Timeout}
	var conn net.Conn
	var err error
	if s.tls != nil {
		td := tls.Dialer{NetDialer: &d, Config: s.tls}
		conn, err = td.DialContext(ctx, "tcp", s.addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", s.addr)
	}
	if err != nil {
		return fmt.Errorf("TCP %s: %w", s.addr, err)
	}
	s.conn, s.reader = conn, bufio.NewReaderSize(conn, 4096)
	if s.token == "" {
		return nil
	}
	line, err := s.exchange(ctx, []byte("auth "+s.token+"\n"))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "ok auth") {
		s.close()
		if strings.HasPrefix(line, "error unavailable") {
			return fmt.Errorf("TCP %s: %s", s.addr, line)
		}
		return &authError{msg: fmt.Sprintf("TCP %s: the token was refused: %s", s.addr, line)}
	}
	return nil
}

// exchange writes msg and reads one reply line, within the timeout (and ctx).
func (s *tcpSender) exchange(ctx context.Context, msg []byte) (string, error) {
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn := s.conn
	_ = conn.SetDeadline(deadline)
	// A cancelled context (Close) interrupts a blocked write or read at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(msg); err != nil {
		s.close()
		return "", fmt.Errorf("TCP %s: %w", s.addr, err)
	}
	line, err := s.reader.ReadString('\n')
	if err != nil {
		s.close()
		return "", fmt.Errorf("TCP %s: no acknowledgement: %w", s.addr, err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (s *tcpSender) send(ctx context.Context, lines [][]byte) (int, int, error) {
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return 0, 0, err
		}
	}
	line, err := s.exchange(ctx, jsonArrayLine(lines))
	if err != nil {
		return 0, 0, err
	}
	parts := strings.Fields(line)
	switch {
	case len(parts) >= 3 && parts[0] == "ok":
		accepted, err1 := strconv.Atoi(parts[1])
		refused, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			s.close()
			return 0, 0, fmt.Errorf("TCP %s: unreadable reply %q", s.addr, line)
		}
		return accepted, refused, nil
	case len(parts) >= 2 && parts[0] == "error" && parts[1] == "unavailable":
		s.close()
		return 0, 0, fmt.Errorf("TCP %s: %s", s.addr, line)
	case len(parts) >= 2 && parts[0] == "error" && (parts[1] == "unauthorized" || parts[1] == "forbidden"):
		s.close()
		return 0, 0, &authError{msg: fmt.Sprintf("TCP %s: %s", s.addr, line)}
	case len(parts) >= 1 && parts[0] == "error":
		return 0, 0, &rejectedError{msg: fmt.Sprintf("TCP %s: %s", s.addr, line)}
	default:
		s.close()
		return 0, 0, fmt.Errorf("TCP %s: unexpected reply %q", s.addr, line)
	}
}

func (s *tcpSender) close() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn, s.reader = nil, nil
	}
}
