package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// PKI is a test CA's files and the certificates it signed: the server's
// (for 127.0.0.1 and localhost) and a client's; Stranger is a client
// certificate and key of another CA. Keys are 0600.
type PKI struct {
	CA                     string
	ServerCert, ServerKey  string
	ClientCert, ClientKey  string
	StrangerCert, Stranger string
}

// NewPKI makes a PKI in a t.TempDir.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t, "tether test CA")
	other, otherKey := newCA(t, "another CA")
	p := PKI{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.CA, "CERTIFICATE", ca.Raw, 0o644)
	p.ServerCert, p.ServerKey = issue(t, dir, "server", ca, caKey, true)
	p.ClientCert, p.ClientKey = issue(t, dir, "client", ca, caKey, false)
	p.StrangerCert, p.Stranger = issue(t, dir, "stranger", other, otherKey, false)
	return p
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func issue(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb, 0o600)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, kind string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
}

// EmbeddedTLS is Embedded serving its clients over TLS with p's server
// certificate, and only clients with a certificate of p's CA (etcd's
// --client-cert-auth). It returns the https URL.
func EmbeddedTLS(t testing.TB, p PKI) string {
	t.Helper()
	var https string
	Embedded(t, func(cfg *embed.Config) {
		u := cfg.ListenClientUrls[0]
		u.Scheme = "https"
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u}, []url.URL{u}
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = p.ServerCert, p.ServerKey
		cfg.ClientTLSInfo.TrustedCAFile = p.CA
		cfg.ClientTLSInfo.ClientCertAuth = true
		https = fmt.Sprintf("https://%s", u.Host)
	})
	return https
}
