package storekit

// MaxSQLIdentLen is the longest SQL identifier a store may use: PostgreSQL
// truncates names at 63 bytes, MySQL allows 64, SQLite has no limit.
const MaxSQLIdentLen = 63

// SQLIdent is the one rule for the SQL identifiers a store is configured
// with (a table, a schema): 1 to maxLen bytes (MaxSQLIdentLen if maxLen is
// 0 or larger) of lower-case ASCII letters, digits and '_', not starting
// with a digit. Such a name means the same quoted and unquoted in
// PostgreSQL, MySQL and SQLite, so a person's own SQL can name the table
// without quotes, and it is never interpolated into SQL unchecked. what
// names the identifier in the error ("table", "schema").
//
// A store whose engine ignores the case of identifiers uses SQLIdentFold.
// Reserved prefixes (pg_, sqlite_) are the engine's rule and the store's to
// add.
func (k Kit) SQLIdent(op, what, name string, maxLen int) error {
	return k.sqlIdent(op, what, name, maxLen, false)
}

// SQLIdentFold is SQLIdent for an engine that ignores the case of ASCII
// letters in identifiers (SQLite): the name is checked as the engine sees
// it, in lower case, so upper-case letters are allowed too.
func (k Kit) SQLIdentFold(op, what, name string, maxLen int) error {
	return k.sqlIdent(op, what, name, maxLen, true)
}

func (k Kit) sqlIdent(op, what, name string, maxLen int, fold bool) error {
	if maxLen <= 0 || maxLen > MaxSQLIdentLen {
		maxLen = MaxSQLIdentLen
	}
	if name == "" {
		return k.Invalid(op, "%s name is empty", what)
	}
	if len(name) > maxLen {
		return k.Invalid(op, "%s name %q is %d bytes, the limit is %d", what, name, len(name), maxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= 'A' && c <= 'Z' && fold:
		case c >= '0' && c <= '9' && i > 0:
		case fold:
			return k.Invalid(op, "%s name %q is not a plain SQL identifier (letters, digits and '_', not starting with a digit)", what, name)
		default:
			return k.Invalid(op, "%s name %q is not a plain SQL identifier (lower-case letters, digits and '_', not starting with a digit)", what, name)
		}
	}
	return nil
}
