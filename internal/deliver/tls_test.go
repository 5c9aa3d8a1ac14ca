package deliver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/deliver"
)

func TestTLSConfigNil(t *testing.T) {
	var c *deliver.TLSConfig
	cfg, err := c.Config()
	if cfg != nil || err != nil {
		t.Fatalf("nil TLSConfig: got %v, %v; want nil, nil", cfg, err)
	}
}

func TestTLSConfigCA(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	cfg, err := (&deliver.TLSConfig{CAPEM: pemText, ServerName: "broker.example", InsecureSkipVerify: true}).Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || cfg.ServerName != "broker.example" || !cfg.InsecureSkipVerify {
		t.Fatalf("config not carried: %+v", cfg)
	}
	if _, err := (&deliver.TLSConfig{CAPEM: "not a pem"}).Config(); err == nil || !strings.Contains(err.Error(), "ca_pem") {
		t.Fatalf("bad PEM: err = %v, want one naming ca_pem", err)
	}
}
