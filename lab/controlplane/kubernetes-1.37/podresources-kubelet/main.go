// podresources-kubelet serves the kubelet's pod-resources API
// (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix socket with the
// kubelet's own server code: the gRPC server is set up as
// k8s.io/kubernetes/pkg/kubelet/server.ListenAndServePodResources does
// (v1 service, upstream's rate limiter), and List, Get and
// GetAllocatableResources are upstream's NewV1PodResourcesServer. Only the
// providers are the double's: they read the pods and their devices from a
// JSON file on every call, so a test changes what the "kubelet" assigned
// by rewriting the file.
//
//	podresources-kubelet -socket PATH -state FILE
//
// FILE: {"pods": [{"namespace": "ns", "name": "p", "uid": "u",
//
//	"containers": [{"name": "c", "devices": [{"resource": "nvidia.com/gpu",
//	"ids": ["GPU-..."]}]}]}]}
//
// A missing or unreadable FILE lists no pods. Built by scripts/controlplane
// (component podresources-kubelet) from the module this directory is in,
// so it is the same pinned Kubernetes as the control plane.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	apisgrpc "k8s.io/kubernetes/pkg/kubelet/apis/grpc"
)

type deviceState struct {
	Resource string   `json:"resource"`
	IDs      []string `json:"ids"`
}

type containerState struct {
	Name    string        `json:"name"`
	Devices []deviceState `json:"devices"`
}

type podState struct {
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	UID        string           `json:"uid"`
	Containers []containerState `json:"containers"`
}

type state struct {
	Pods []podState `json:"pods"`
}

// providers reads the state file on every call.
type providers struct{ file string }

func (p providers) read() state {
	var s state
	data, err := os.ReadFile(p.file)
	if err != nil {
		return s
	}
	if err := json.Unmarshal(data, &s); err != nil {
		fmt.Fprintf(os.Stderr, "podresources-kubelet: %s: %v\n", p.file, err)
	}
	return s
}

func (p providers) pods() []*v1.Pod {
	var out []*v1.Pod
	for _, ps := range p.read().Pods {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ps.Namespace, Name: ps.Name, UID: types.UID(ps.UID)}}
		for _, c := range ps.Containers {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c.Name})
		}
		out = append(out, pod)
	}
	return out
}

// PodsProvider
func (p providers) GetActivePods() []*v1.Pod { return p.pods() }
func (p providers) GetPods() []*v1.Pod       { return p.pods() }
func (p providers) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.pods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// DevicesProvider
func (p providers) UpdateAllocatedDevices(klog.Logger) {}
func (p providers) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for _, ps := range p.read().Pods {
		if ps.UID != podUID {
			continue
		}
		for _, c := range ps.Containers {
			if c.Name != containerName {
				continue
			}
			for _, d := range c.Devices {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: d.Resource, DeviceIds: d.IDs})
			}
		}
	}
	return out
}
func (p providers) GetAllocatableDevices(klog.Logger) []*podresourcesapi.ContainerDevices { return nil }

// CPUsProvider, MemoryProvider, DynamicResourcesProvider: nothing assigned.
func (p providers) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (p providers) GetPodCPUs(string) []int64              { return nil }
func (p providers) GetAllocatableCPUs() []int64            { return nil }
func (p providers) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (p providers) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (p providers) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory {
	return nil
}
func (p providers) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

func main() {
	socket := flag.String("socket", "", "unix socket to serve on (removed first if there)")
	file := flag.String("state", "", "JSON file with the pods and their devices, read on every call")
	flag.Parse()
	if *socket == "" || *file == "" {
		fmt.Fprintln(os.Stderr, "usage: podresources-kubelet -socket PATH -state FILE")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	p := providers{file: *file}
	all := podresources.PodResourcesProviders{Pods: p, Devices: p, Cpus: p, Memory: p, DynamicResources: p}
	// As pkg/kubelet/server/server.go ListenAndServePodResources.
	server := grpc.NewServer(apisgrpc.WithRateLimiter(ctx, "podresources", podresources.DefaultQPS, podresources.DefaultBurstTokens))
	podresourcesapi.RegisterPodResourcesListerServer(server, podresources.NewV1PodResourcesServer(ctx, all))
	_ = os.Remove(*socket)
	l, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-kubelet: listen %s: %v\n", *socket, err)
		os.Exit(1)
	}
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	fmt.Fprintf(os.Stderr, "podresources-kubelet: serving %s\n", *socket)
	if err := server.Serve(l); err != nil {
		fmt.Fprintf(os.Stderr, "podresources-kubelet: %v\n", err)
		os.Exit(1)
	}
}
