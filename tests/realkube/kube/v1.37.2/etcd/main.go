// Command etcd is etcd v3.7.0's server, the version Kubernetes v1.37.2 pins in build/dependencies.yaml.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
