// fit-harness answers, for cluster snapshots and pending pods, which nodes
// kube-scheduler v1.37.2's own filter plugins admit each pod to, and why
// each other node is rejected: the scheduler framework built from the
// in-tree registry (k8s.io/kubernetes/pkg/scheduler/framework/runtime
// NewFramework, plugins.NewInTreeRegistry) over a snapshot of the cluster
// (backend/cache.NewSnapshot), PreFilter then Filter on every node, the way
// cluster-autoscaler's scheduler-based predicate checker calls it
// (simulator/clustersnapshot/predicate/plugin_runner.go). Accord's fit is
// tested against its answers (benches/src/fitdiff).
//
// The profile is the default profile's filters that Accord models today:
// NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
// NodeResourcesFit, VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
// VolumeZone, PodTopologySpread and InterPodAffinity, each with the
// default profile's arguments (KubeSchedulerConfiguration v1 defaults).
// Feature gates are the binary's defaults, as kube-scheduler's are.
//
//	fit-harness < cases.jsonl > answers.jsonl
//
// Each input line: {"namespaces": [Namespace], "nodes": [Node], "pods":
// [Pod bound, spec.nodeName set], "pending": [Pod], "pvcs":
// [PersistentVolumeClaim], "pvs": [PersistentVolume], "storageClasses":
// [StorageClass], "csiNodes": [CSINode]}; each output line: {"pods":
// [{"pod": "ns/name", "nodes": {"NODE": "" (admitted) or "Plugin: reason;
// reason"}}]} in the order of "pending". The plugins' listers read
// informers' indexers; the informers are never started: each case's
// objects replace the indexers' contents (the volume binder's caches read
// the PV and PVC indexers directly: volumebinding/passive_assume_cache.go).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

type input struct {
	Namespaces     []v1.Namespace             `json:"namespaces"`
	Nodes          []v1.Node                  `json:"nodes"`
	Pods           []v1.Pod                   `json:"pods"`
	Pending        []v1.Pod                   `json:"pending"`
	PVCs           []v1.PersistentVolumeClaim `json:"pvcs"`
	PVs            []v1.PersistentVolume      `json:"pvs"`
	StorageClasses []storagev1.StorageClass   `json:"storageClasses"`
	CSINodes       []storagev1.CSINode        `json:"csiNodes"`
}

type podAnswer struct {
	Pod   string            `json:"pod"`
	Nodes map[string]string `json:"nodes"`
}

type output struct {
	Pods []podAnswer `json:"pods"`
}

// The filters compared, as the default profile orders them.
var filters = []string{
	names.NodeUnschedulable,
	names.NodeName,
	names.TaintToleration,
	names.NodeAffinity,
	names.NodePorts,
	names.NodeResourcesFit,
	names.VolumeRestrictions,
	names.NodeVolumeLimits,
	names.VolumeBinding,
	names.VolumeZone,
	names.PodTopologySpread,
	names.InterPodAffinity,
}

func profile() (*config.KubeSchedulerProfile, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	p := cfg.Profiles[0]
	enabled := []config.Plugin{{Name: names.PrioritySort}, {Name: names.DefaultBinder}}
	for _, f := range filters {
		enabled = append(enabled, config.Plugin{Name: f})
	}
	p.Plugins = &config.Plugins{MultiPoint: config.PluginSet{Enabled: enabled}}
	return &p, nil
}

func main() {
	klog.SetOutput(os.Stderr)
	metrics.InitMetrics()
	ctx := context.Background()
	prof, err := profile()
	if err != nil {
		fail("default profile: %v", err)
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var factory informers.SharedInformerFactory
	var f schedulerframework.Framework
	// One framework for every case (a framework per case registers its
	// informers' handlers again each time, and slows with every case): its
	// snapshot is swapped under it.
	lister := &swappable{}
	registry := plugins.NewInTreeRegistry()
	for line := 1; ; line++ {
		text, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(text))) == 0 {
			if err != nil {
				return
			}
			continue
		}
		var c input
		if err := json.Unmarshal(text, &c); err != nil {
			fail("line %d: %v", line, err)
		}
		if factory == nil {
			factory = informers.NewSharedInformerFactory(fake.NewClientset(), 0)
		}
		if err := replace(factory, &c); err != nil {
			fail("line %d: %v", line, err)
		}
		pods := make([]*v1.Pod, len(c.Pods))
		for i := range c.Pods {
			pods[i] = &c.Pods[i]
		}
		nodes := make([]*v1.Node, len(c.Nodes))
		for i := range c.Nodes {
			nodes[i] = &c.Nodes[i]
		}
		snapshot := cache.NewSnapshot(pods, nodes)
		lister.Snapshot = snapshot
		if f == nil {
			f, err = runtime.NewFramework(ctx, registry, prof,
				runtime.WithInformerFactory(factory),
				runtime.WithSnapshotSharedLister(lister),
				// As scheduler.go New builds it.
				runtime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(
					factory.Storage().V1().CSINodes().Lister())),
			)
			if err != nil {
				fail("line %d: framework: %v", line, err)
			}
		}
		infos, err := snapshot.NodeInfos().List()
		if err != nil {
			fail("line %d: %v", line, err)
		}
		var o output
		for i := range c.Pending {
			o.Pods = append(o.Pods, answer(ctx, f, &c.Pending[i], infos))
		}
		b, err := json.Marshal(o)
		if err != nil {
			fail("line %d: %v", line, err)
		}
		out.Write(b)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			fail("stdout: %v", err)
		}
	}
}

// replace puts the case's objects in the informers' indexers, in place of
// the last case's.
func replace(factory informers.SharedInformerFactory, c *input) error {
	core := factory.Core().V1()
	st := factory.Storage().V1()
	lists := []struct {
		indexer interface {
			Replace([]interface{}, string) error
		}
		objects []interface{}
	}{
		{core.Namespaces().Informer().GetIndexer(), objects(c.Namespaces)},
		{core.PersistentVolumeClaims().Informer().GetIndexer(), objects(c.PVCs)},
		{core.PersistentVolumes().Informer().GetIndexer(), objects(c.PVs)},
		{st.StorageClasses().Informer().GetIndexer(), objects(c.StorageClasses)},
		{st.CSINodes().Informer().GetIndexer(), objects(c.CSINodes)},
	}
	for _, l := range lists {
		if err := l.indexer.Replace(l.objects, "1"); err != nil {
			return err
		}
	}
	return nil
}

func objects[T any](items []T) []interface{} {
	out := make([]interface{}, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// swappable is the framework's snapshot lister: the case's snapshot,
// swapped between cases (cluster-autoscaler's DelegatingSchedulerSharedLister
// does the same).
type swappable struct {
	*cache.Snapshot
}

func answer(ctx context.Context, f schedulerframework.Framework, pod *v1.Pod, infos []fwk.NodeInfo) podAnswer {
	a := podAnswer{Pod: pod.Namespace + "/" + pod.Name, Nodes: map[string]string{}}
	state := schedulerframework.NewCycleState()
	pre, status, _ := f.RunPreFilterPlugins(ctx, state, pod)
	for _, info := range infos {
		name := info.Node().Name
		switch {
		case !status.IsSuccess():
			a.Nodes[name] = why(status)
		case !pre.AllNodes() && !pre.NodeNames.Has(name):
			a.Nodes[name] = "PreFilter: node not among the nodes PreFilter kept"
		default:
			if s := f.RunFilterPlugins(ctx, state, pod, info); !s.IsSuccess() {
				a.Nodes[name] = why(s)
			} else {
				a.Nodes[name] = ""
			}
		}
	}
	return a
}

func why(s *fwk.Status) string {
	reasons := append([]string(nil), s.Reasons()...)
	sort.Strings(reasons)
	return s.Plugin() + ": " + strings.Join(reasons, "; ")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fit-harness: "+format+"\n", args...)
	os.Exit(1)
}
