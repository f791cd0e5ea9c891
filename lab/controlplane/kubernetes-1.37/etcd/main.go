// etcd, from the go.etcd.io/etcd/server/v3 module that k8s.io/kubernetes
// pins: etcdmain is upstream's own entry point (the etcd binary's main), so
// the flags are etcd's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
