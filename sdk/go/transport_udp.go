package sluice

import (
	"context"
	"fmt"
	"net"
	"time"
)

// udpSender packs events into NDJSON datagrams of at most MaxDatagramBytes. Fire and forget: the
// server does not acknowledge UDP, so a sent datagram counts as delivered.
type udpSender struct {
	addr string
	cfg  *EmitterConfig
	conn net.Conn
}

func (s *udpSender) send(ctx context.Context, lines [][]byte) (int, int, error) {
	if s.conn == nil {
		d := net.Dialer{Timeout: s.cfg.Timeout}
		conn, err := d.DialContext(ctx, "udp", s.addr)
		if err != nil {
			return 0, 0, fmt.Errorf("UDP %s: %w", s.addr, err)
		}
		s.conn = conn
	}
	sent, failed := 0, 0
	var firstErr error
	for start := 0; start < len(lines); {
		end, size := start, 0
		for end < len(lines) && (end == start || size+len(lines[end])+1 <= s.cfg.MaxDatagramBytes) {
			size += len(lines[end]) + 1
			end++
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
		if _, err := s.conn.Write(ndjson(lines[start:end])); err != nil {
			failed += end - start
			if firstErr == nil {
				firstErr = err
			}
		} else {
			sent += end - start
		}
		start = end
	}
	if failed > 0 {
		s.close()
		// Not retried (fire and forget): the unsent events are reported as refused.
		return sent, failed, nil
	}
	return sent, 0, nil
}

func (s *udpSender) close() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}
