package sqlfence_test

import (
	"fmt"
	"strconv"

	"github.com/leasehold/leasehold/store"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func storeTerm(name, holder string, token int64) store.Term {
	return store.Term{Name: name, Holder: holder, Token: token}
}

// hof is the holder of token in tests where each token is one term.
func hof(token int64) string { return "h" + itoa(token) }
