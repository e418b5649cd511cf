package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/store"
	lhmysql "github.com/leasehold/leasehold/store/mysql"
	"github.com/leasehold/leasehold/store/storetest"
)

// harnessMinTTL is the shortest lease the suite waits out.
const harnessMinTTL = 100 * time.Millisecond

// harnessQueueTTL is the shortest queue place the suite waits on: an
// Enqueue is a transaction of several round trips and a commit, and on a
// loaded machine a place of 100 ms expired before the next waiter's Enqueue
// had counted it (TestLeastPrivilege/QueueDeadPlaceExpires, MySQL at load 27).
const harnessQueueTTL = time.Second

// TestConformance runs the suite on stores from Open, each subtest in its
// own database.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			db := migrated(t)
			return func() (store.Store, error) {
				return lhmysql.Open(context.Background(), dbConfig(t, db), lhmysql.Options{})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
		Losses:   mysqlLosses(),
	})
}

// TestConformanceRawPool runs the suite on pools the caller opened with the
// driver's defaults: clientFoundRows and interpolateParams off, so every
// statement is prepared, and a renewal that changed nothing reports 0 rows.
func TestConformanceRawPool(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) func() (store.Store, error) {
			db := migrated(t)
			return func() (store.Store, error) {
				c, err := mysql.NewConnector(dbConfig(t, db))
				if err != nil {
					return nil, err
				}
				pool := sql.OpenDB(c)
				pool.SetMaxOpenConns(2)
				t.Cleanup(func() { pool.Close() })
				return lhmysql.NewDB(context.Background(), pool, lhmysql.Options{})
			}
		},
		MinTTL:   harnessMinTTL,
		QueueTTL: harnessQueueTTL,
	})
}

// TestConformanceIsolation runs the suite with sessions at SERIALIZABLE and
// READ COMMITTED (the default is REPEATABLE READ): the statements' answers
// must not depend on the pool's isolation.
func TestConformanceIsolation(t *testing.T) {
	for _, level := range []string{"'SERIALIZABLE'", "'READ-COMMITTED'"} {
		t.Run(level, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) func() (store.Store, error) {
					db := migrated(t)
					return func() (store.Store, error) {
						cfg := dbConfig(t, db)
						cfg.Params = map[string]string{"tx_isolation": level}
						return lhmysql.Open(context.Background(), cfg, lhmysql.Options{})
					}
				},
				MinTTL:   harnessMinTTL,
				QueueTTL: harnessQueueTTL,
			})
		})
	}
}
