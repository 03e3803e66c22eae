// Command hami-webhook serves HAMi's own admission webhook and nothing else of its scheduler: the reference the
// parity suite and the benchmarks compare hami-webhook with. scripts/hami-reference.sh compiles this file inside
// HAMi's module (a copy of a HAMi tree), so the handler, the vendors and the device-config loading are HAMi's
// code at the versions its go.sum pins.
//
// It does what HAMi's cmd/scheduler/main.go does for /webhook, with the same flag names and defaults:
// config.GlobalFlagSet() (the vendors' flags, --device-config-file, klog's), config.InitDevices(),
// routes.WebHookRoute() on POST /webhook, /healthz, and the TLS server with a certwatcher. Left out: the
// Kubernetes client, node registration, /filter and /bind, metrics, leader election. The webhook reads none of
// them; its quota check reads the scheduler's quota cache, empty here, so HAMi's quota always fits.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/spf13/pflag"
	klog "k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/Project-HAMi/HAMi/pkg/scheduler/config"
	"github.com/Project-HAMi/HAMi/pkg/scheduler/routes"
)

func main() {
	var tlsCertFile, tlsKeyFile string
	flags := pflag.NewFlagSet("hami-webhook", pflag.ExitOnError)
	flags.StringVar(&config.HTTPBind, "http_bind", "127.0.0.1:8080", "http server bind address")
	flags.StringVar(&tlsCertFile, "cert_file", "", "tls cert file")
	flags.StringVar(&tlsKeyFile, "key_file", "", "tls key file")
	flags.StringVar(&config.SchedulerName, "scheduler-name", "", "the name to be added to pod.spec.schedulerName if not empty")
	flags.BoolVar(&config.ForceOverwriteDefaultScheduler, "force-overwrite-default-scheduler", true,
		"Overwrite schedulerName in Pod Spec when set to the const DefaultSchedulerName in https://k8s.io/api/core/v1 package")
	flags.AddGoFlagSet(config.GlobalFlagSet())
	_ = flags.Parse(os.Args[1:])
	if err := serve(tlsCertFile, tlsKeyFile); err != nil {
		klog.Fatal(err)
	}
}

func serve(certFile, keyFile string) error {
	config.InitDevices()
	router := httprouter.New()
	router.POST("/webhook", routes.WebHookRoute())
	router.GET("/healthz", routes.HealthzRoute())
	server := &http.Server{
		Addr:              config.HTTPBind,
		Handler:           router,
		ReadHeaderTimeout: 15 * time.Second,
		ReadTimeout:       60 * time.Second,
	}
	if certFile == "" || keyFile == "" {
		return server.ListenAndServe()
	}
	watcher, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("failed to create cert watcher: %w", err)
	}
	go func() {
		if err := watcher.Start(context.Background()); err != nil {
			klog.ErrorS(err, "cert watcher error")
		}
	}()
	server.TLSConfig = &tls.Config{GetCertificate: watcher.GetCertificate}
	klog.InfoS("Starting HTTPS server", "address", config.HTTPBind)
	return server.ListenAndServeTLS("", "")
}
