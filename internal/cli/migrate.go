package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

type migrateCmd struct {
	_ [0]func() // not comparable: spares the binary an equality function

	env   *Env
	fs    *flag.FlagSet
	store storeFlag
}

func newMigrateCmd(env *Env) Command {
	c := &migrateCmd{env: env}
	c.fs = newFlagSet(env, "migrate", "[flags]", `
Creates the lease table (and what goes with it) in a SQL store if it is missing; on NATS,
the fair queues' bucket beside the lease bucket (BUCKET-queue), even with create=false.
It is idempotent and changes no lease. Stores without a schema have nothing to migrate.

Examples:
  leasehold migrate --store postgres://admin@db/app
  leasehold migrate --store 'sqlite:///var/lib/app/leases.db?table=app_leases'
  leasehold migrate --store 'nats://admin@host:4222/leases'`)
	c.store.register(c.fs)
	return c
}

func (c *migrateCmd) Run(ctx context.Context, args []string) error {
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if c.fs.NArg() != 0 {
		return usagef("takes no arguments, got %q", c.fs.Args())
	}
	st, err := c.store.open(ctx, c.env)
	if err != nil {
		return err
	}
	defer closeStore(st)
	m, ok := st.Store.(store.Migrator)
	if !ok {
		fmt.Fprintf(c.env.Stdout, "%s has no schema: nothing to migrate\n", st.Name)
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, c.store.timeout)
	defer cancel()
	if err := m.Migrate(mctx); err != nil {
		return fmt.Errorf("migrate %s: %w", st.Name, err)
	}
	fmt.Fprintf(c.env.Stdout, "%s: migrated: what this version needs is there (a lease table, or NATS's fair queues' bucket); no lease changed\n", st.Name)
	return nil
}
