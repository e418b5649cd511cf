package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/leasehold/leasehold/fence"
)

// The classic example, over HTTP: node-b writes with token 2; node-a, paused
// and resumed with token 1, is refused with 409 Conflict.
func ExampleMiddleware() {
	var swept []string
	sweep := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		swept = append(swept, string(b))
	})
	guard := fence.NewGuard(nil) // use fence.NewFilePersister in production
	srv := httptest.NewServer(fence.Middleware(guard, fence.MiddlewareConfig{})(sweep))
	defer srv.Close()

	post := func(node string, token int64) {
		c := &http.Client{Transport: &fence.Transport{Lease: "sweeper", Source: fence.StaticTerm{Holder: node, Token: token}}}
		resp, err := c.Post(srv.URL, "text/plain", strings.NewReader(node))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		if err := fence.CheckResponse(resp); errors.Is(err, fence.ErrStale) {
			fmt.Printf("%s: %d %v\n", node, resp.StatusCode, err)
			return
		}
		fmt.Printf("%s: %d\n", node, resp.StatusCode)
	}
	post("node-b", 2)
	post("node-a", 1)
	fmt.Println("swept by:", swept)
	// Output:
	// node-b: 200
	// node-a: 409 leasehold/fence: stale fencing token for "sweeper": token 1 is below the highest admitted 2
	// swept by: [node-b]
}

// A Guard in front of an in-process resource (give NewGuard a FilePersister
// so that a restart does not forget the highest token).
func ExampleGuard_Do() {
	ctx := context.Background()
	guard := fence.NewGuard(nil)
	state := "empty"
	write := func(holder string, token int64) error {
		return guard.Do(ctx, "config", holder, token, func(context.Context) error {
			state = "from " + holder
			return nil
		})
	}
	fmt.Println(write("node-b", 2))
	err := write("node-a", 1)
	var se *fence.StaleError
	if errors.As(err, &se) {
		fmt.Printf("refused token %d, highest %d\n", se.Token, se.Highest)
	}
	// After a store lost data, token 2 was granted again, to node-c: a number
	// is not a term, and the Guard knows token 2 is node-b's.
	err = write("node-c", 2)
	fmt.Println(errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrTokenReused))
	fmt.Println(state)
	// Output:
	// <nil>
	// refused token 1, highest 2
	// true true
	// from node-b
}
