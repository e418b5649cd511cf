package storekit

// NoTable is a SQL store's error for a statement that found its lease table
// missing: it names the table, says how to create it, and matches
// notMigrated (the store's ErrNotMigrated). serverMsg is the server's own
// message, or "" where the store found the table missing itself.
func (k Kit) NoTable(op, serverMsg, table string, notMigrated error) error {
	how := "create it with `leasehold migrate`, (*" + k.Store + ".Store).Migrate, or Options.CreateIfMissing"
	if serverMsg == "" {
		return k.Errorf(op, "table %s does not exist: %w; %s", table, notMigrated, how)
	}
	return k.Errorf(op, "%s (table %s): %w; %s", serverMsg, table, notMigrated, how)
}

// OldTable is a SQL store's error for a statement that found its lease
// table without a column or constraint it needs: the table was made by
// something else, or by an older version. It matches notMigrated.
func (k Kit) OldTable(op, serverMsg, table string, notMigrated error) error {
	return k.Errorf(op, "%s: table %s is not a migrated lease table: %w; `leasehold migrate` or (*%s.Store).Migrate adds what is missing",
		serverMsg, table, notMigrated, k.Store)
}
