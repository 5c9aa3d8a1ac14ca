package deliver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strconv"

	"github.com/delayq/delayq/internal/domain"
)

// TLSConfig is the *tls.Config of a target's TLS settings; nil for nil
// (plain TCP).
func TLSConfig(s *domain.TLSSettings) (*tls.Config, error) {
	if s == nil {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName,
		InsecureSkipVerify: s.InsecureSkipVerify} // #nosec G402 -- the operator's explicit choice
	if s.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(s.CAPEM)) {
			return nil, errors.New("tls.ca_pem: no certificate could be parsed")
		}
		c.RootCAs = pool
	}
	return c, nil
}

// Headers are the headers a target carries for m: the message's own plus
// the delayq ones, which win over message headers of the same name.
func Headers(m Message) map[string]string {
	h := make(map[string]string, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderID] = m.ID
	h[HeaderAttempt] = strconv.Itoa(m.Attempt)
	h[HeaderTopic] = m.Topic
	return h
}

// The delayq headers targets add (named like the push headers).
const (
	HeaderID      = "Delayq-Message-Id"
	HeaderAttempt = "Delayq-Attempt"
	HeaderTopic   = "Delayq-Topic"
)
