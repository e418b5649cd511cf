package promlease_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/promlease"
	"github.com/leasehold/leasehold/store/memstore"
)

// A service that embeds leasehold serves its lease metrics from its own
// registry, next to its other metrics, on its own /metrics.
func Example() {
	reg := prometheus.NewRegistry() // the service's registry
	m := promlease.New(promlease.Options{})
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	acquired := make(chan struct{})
	e, err := leasehold.NewElector(memstore.New(), "invoice-sweeper", leasehold.Config{
		Identity: "replica-1",
		OnEvent: func(ev leasehold.Event) {
			m.Observe(ev) // events arrive one at a time, in order
			if ev.Kind == leasehold.EventAcquired {
				close(acquired)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(context.Background(), func(ctx context.Context, l *leasehold.Lease) error {
		<-acquired
		fmt.Println("while leading:")
		scrape(srv.URL, "leasehold_is_leader", "leasehold_token", "leasehold_terms_started_total")
		return nil // steps down and releases the lease
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after release:")
	scrape(srv.URL, "leasehold_is_leader", `leasehold_terms_ended_total{lease="invoice-sweeper",reason="released"}`, "leasehold_store_errors_total")
	// Output:
	// while leading:
	// leasehold_is_leader{lease="invoice-sweeper"} 1
	// leasehold_terms_started_total{lease="invoice-sweeper"} 1
	// leasehold_token{lease="invoice-sweeper"} 1
	// after release:
	// leasehold_is_leader{lease="invoice-sweeper"} 0
	// leasehold_store_errors_total{lease="invoice-sweeper",op="acquire"} 0
	// leasehold_store_errors_total{lease="invoice-sweeper",op="release"} 0
	// leasehold_store_errors_total{lease="invoice-sweeper",op="renew"} 0
	// leasehold_terms_ended_total{lease="invoice-sweeper",reason="released"} 1
}

// scrape prints the lines of /metrics that start with one of prefixes.
func scrape(url string, prefixes ...string) {
	resp, err := http.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range prefixes {
			if strings.HasPrefix(line, p+"{") || strings.HasPrefix(line, p+" ") || (strings.HasSuffix(p, "}") && strings.HasPrefix(line, p)) {
				fmt.Println(line)
				break
			}
		}
	}
}
