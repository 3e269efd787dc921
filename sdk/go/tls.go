package sluice

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// tlsConfig trusts the system's roots plus caFile (PEM) when given.
func tlsConfig(caFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("sluice: CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("sluice: CA file %s: no PEM certificate in it", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// httpClient is a client for one server: its TLS trust, no overall timeout (reads stream; each
// request carries its own deadline).
func httpClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	cfg, err := tlsConfig(caFile, "")
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = cfg
	tr.ResponseHeaderTimeout = 0
	tr.IdleConnTimeout = 30 * time.Second
	tr.MaxIdleConnsPerHost = 4
	return &http.Client{Transport: tr}, nil
}

// setBearer adds the token, if any.
func setBearer(h http.Header, token string) {
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}

// baseURL strips the trailing slash of a base URL, so paths can be appended.
func baseURL(raw string) string { return strings.TrimRight(raw, "/") }
