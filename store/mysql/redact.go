package mysql

import (
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/storekit"
)

// redactCfg names a server for messages: user@address/db, never the
// password.
func redactCfg(c *mysql.Config) string {
	u := &url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + c.DBName}
	if c.User != "" {
		u.User = url.User(c.User)
	}
	return store.RedactURL(u)
}

// scrubCfg removes the config's password from a driver's message.
func scrubCfg(c *mysql.Config, msg string) string {
	if c.Passwd == "" {
		return msg
	}
	return storekit.Scrub(msg, storekit.Secrets(&url.URL{User: url.UserPassword(c.User, c.Passwd)}))
}

// scrubDSN removes a go-sql-driver DSN's password ("user:password@tcp...")
// from a message.
func scrubDSN(dsn, msg string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return msg
	}
	_, pw, ok := strings.Cut(dsn[:at], ":")
	if !ok || pw == "" {
		return msg
	}
	return strings.ReplaceAll(msg, pw, store.Redacted)
}
