package sqlfence_test

import (
	"fmt"
	"strconv"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
