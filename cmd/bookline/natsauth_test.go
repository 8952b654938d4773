package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
)

func TestServeRefusesPublicNATSWithoutTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--nats-listen", addr}, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "reachable from other machines: give --nats-listen-tls-cert") {
			t.Fatalf("%s: exit %d, stderr:\n%s", addr, code, errb.String())
		}
		if _, err := os.Stat(queue.IndexFile(dir)); err == nil {
			t.Fatalf("%s: the index was opened before refusing", addr)
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"serve", "--data-dir", t.TempDir(), "--nats-auth", "maybe"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "want auto or on") {
		t.Fatalf("--nats-auth maybe: %d %s", code, errb.String())
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bookline test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestServeNATSBehindTheSameTrustAsHTTP runs bookline with API keys and
// its NATS port on every interface (with TLS): what was a way around the
// keys (a NATS client with no credentials publishing a calendar.upsert)
// is refused, while an importer with the credentials that
// `bookline nats-credentials` prints imports as before.
func TestServeNATSBehindTheSameTrustAsHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cert, key := selfSigned(t, dir)
	const admin = "bk_test_admin_key_0123456789"
	keys := fmt.Sprintf(`[{"name":"ops","role":"admin","sha256":%q}]`, httpapi.HashKey(admin))
	p := startProc(t, "serve", "--api-keys", keys, "--data-dir", data, "--http-addr", "127.0.0.1:0",
		"--nats-listen", "0.0.0.0:0", "--nats-listen-tls-cert", cert, "--nats-listen-tls-key", key)
	m := regexp.MustCompile(`msg="embedded nats listening" url=tls://[^:]+:(\d+)`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("no TLS nats url in the log:\n%s", p.output())
	}
	url := "tls://127.0.0.1:" + m[1]

	// Without credentials: refused, so the upsert the HTTP side refuses
	// without a key cannot go around it.
	if nc, err := nats.Connect(url, nats.RootCAs(cert), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a NATS client without credentials connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("connect without credentials: %v", err)
	}
	// Plain text is refused too: the listener requires TLS.
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a plain-text NATS client connected")
	}

	// The importer's credentials, as the README shows them.
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"nats-credentials", "--data-dir", data, "--role", "importer"}, &out, &errb); code != 0 {
		t.Fatalf("nats-credentials: %d %s", code, errb.String())
	}
	importerNK := filepath.Join(dir, "importer.nk")
	if err := os.WriteFile(importerNK, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dir, "rows.csv")
	if err := os.WriteFile(csv, []byte("calendar_id,start,end,customer\nalice,2027-01-04T10:00:00Z,2027-01-04T11:00:00Z,bob\n"+
		"alice,2027-01-04T10:30:00Z,2027-01-04T11:30:00Z,carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := Main(context.Background(), []string{"import", "--nats-url", url, "--tls-ca", cert, "--nkey", importerNK,
		"--file", csv, "--create-calendars"}, &out, &errb)
	if code != 0 && code != 1 || !strings.Contains(out.String()+errb.String(), "accepted") {
		t.Fatalf("import with the importer's credentials: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	st, b := httpDo(t, "GET", p.URL+"/v1/calendars/alice/bookings?from=2027-01-04T00:00:00Z&to=2027-01-05T00:00:00Z", admin, "")
	if st != 200 || strings.Count(string(b), `"status":"confirmed"`) != 1 {
		t.Fatalf("bookings after the import: %d %s", st, b)
	}
	logs := p.output()
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "SU") && strings.Contains(logs, line) {
			t.Fatal("a NATS seed in the logs")
		}
	}
	for _, role := range queue.Roles {
		if st, err := os.Stat(queue.CredentialFile(queue.AuthDirFor(data), role)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s credentials: %v %v", role, err, st)
		}
	}
}
