package deliver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strconv"

	"github.com/delayq/delayq/internal/domain"
)

// TLSConfig is the TLS part of a broker target's settings, shared by every
// target so a topic's settings spell it the same way for each broker.
type TLSConfig struct {
	// CAPEM holds PEM certificates to trust instead of the system pool.
	CAPEM string
	// ServerName overrides the name checked against the server's
	// certificate (default: the host dialled).
	ServerName string
	// InsecureSkipVerify turns certificate checks off; for tests only.
	InsecureSkipVerify bool
}

// Config returns the crypto/tls configuration for c. A nil c means TLS is
// not configured and returns nil, nil.
func (c *TLSConfig) Config() (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	cfg := &tls.Config{
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, // #nosec G402 -- the operator's explicit opt-in, documented as for tests only
		MinVersion:         tls.VersionTLS12,
	}
	if c.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.CAPEM)) {
			return nil, errors.New("tls.ca_pem: no PEM certificate found")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// TLSOf is the TLSConfig of a topic's TLS settings; nil for nil (plain
// TCP).
func TLSOf(s *domain.TLSSettings) *TLSConfig {
	if s == nil {
		return nil
	}
	return &TLSConfig{CAPEM: s.CAPEM, ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify}
}

// Headers are the headers a target carries for m a target carries for m: the message's own plus
// the delayq ones, which win over message headers of the same name.
func Headers(m Message) map[string]string {
	h := make(map[string]string, len(m.Headers)+4)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderID] = m.ID
	h[HeaderAttempt] = strconv.Itoa(m.Attempt)
	h[HeaderTopic] = m.Topic
	h[HeaderPriority] = strconv.Itoa(m.Priority)
	return h
}

// The delayq headers targets add (named like the push headers).
const (
	HeaderID       = "Delayq-Message-Id"
	HeaderAttempt  = "Delayq-Attempt"
	HeaderTopic    = "Delayq-Topic"
	HeaderPriority = "Delayq-Priority"
)
