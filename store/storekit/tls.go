package storekit

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// The TLS parameters of a store URL, spelled the same for every store.
// The older spellings stay accepted as aliases (Params.TLSFiles): etcd's
// cacert, cert and key.
const (
	ParamCAFile     = "ca_file"     // trust the PEM certificates in this file instead of the system roots
	ParamCertFile   = "cert_file"   // a client certificate (PEM), with ParamKeyFile
	ParamKeyFile    = "key_file"    // the client certificate's private key (PEM)
	ParamServerName = "server_name" // the name to verify in the server's certificate
)

// TLSFiles are the TLS parameters a URL gave. Empty fields were not given.
type TLSFiles struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// Given reports whether any TLS parameter was given.
func (f TLSFiles) Given() bool {
	return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.ServerName != ""
}

// Names lists the parameters given, for a message such as "ca_file needs
// the rediss scheme".
func (f TLSFiles) Names() []string {
	var out []string
	for _, x := range []struct{ name, v string }{
		{ParamCAFile, f.CAFile}, {ParamCertFile, f.CertFile}, {ParamKeyFile, f.KeyFile}, {ParamServerName, f.ServerName},
	} {
		if x.v != "" {
			out = append(out, x.name)
		}
	}
	return out
}

// TLSFiles takes the TLS parameters: ca_file (alias cacert), cert_file
// (alias cert), key_file (alias key) and server_name. A client certificate
// and its key go together; an empty value is refused.
func (p *Params) TLSFiles() TLSFiles {
	f := TLSFiles{
		CAFile:     p.nonEmpty(ParamCAFile, "cacert"),
		CertFile:   p.nonEmpty(ParamCertFile, "cert"),
		KeyFile:    p.nonEmpty(ParamKeyFile, "key"),
		ServerName: p.nonEmpty(ParamServerName),
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		p.Invalid("%s and %s go together: give both or neither", ParamCertFile, ParamKeyFile)
	}
	return f
}

func (p *Params) nonEmpty(name string, aliases ...string) string {
	v, ok := p.Lookup(name, aliases...)
	if ok && v == "" {
		p.Invalid("parameter %s is empty", name)
	}
	return v
}

// ApplyTLS reads the files f names into c: the CA bundle into RootCAs, the
// client certificate into Certificates, and sets ServerName if given. A
// file that cannot be read or holds no certificate is an error of p (bad
// input, naming the parameter and the file).
func (p *Params) ApplyTLS(f TLSFiles, c *tls.Config) {
	if p.err != nil {
		return
	}
	if err := ApplyTLS(f, c); err != nil {
		p.Invalid("%v", err)
	}
}

// ApplyTLS is Params.ApplyTLS for files given another way (a store's
// Options): its error names the parameter and the file, and is to be
// wrapped by the caller (Kit.Invalid).
func ApplyTLS(f TLSFiles, c *tls.Config) error {
	if f.CAFile != "" {
		pool, err := LoadCertPool(f.CAFile)
		if err != nil {
			return fmt.Errorf("%s: %w", ParamCAFile, err)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return fmt.Errorf("client certificate (%s %s, %s %s): %w", ParamCertFile, f.CertFile, ParamKeyFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if f.ServerName != "" {
		c.ServerName = f.ServerName
	}
	return nil
}

// NewTLSConfig is a client TLS config (TLS 1.2 or later) with f applied.
func NewTLSConfig(f TLSFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if err := ApplyTLS(f, c); err != nil {
		return nil, err
	}
	return c, nil
}

// LoadCertPool reads a PEM bundle of CA certificates. A file without a
// single certificate is an error: a key or an empty file given by mistake
// would otherwise trust nothing, or (merged with the system roots) hide the
// mistake.
func LoadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
