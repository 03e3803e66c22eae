// Command etcd is etcd v3.5.15's server, the version Kubernetes v1.30.14 pins in build/dependencies.yaml.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
