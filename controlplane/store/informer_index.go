package store

import (
	"fmt"
	"log/slog"
	"reflect"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// IndexFunc returns the values under which obj is indexed (none: obj is
// not in the index), as client-go's cache.IndexFunc. It runs under the
// informer's lock: keep it pure and cheap, never call the store from it.
// An error leaves obj out of that index and is logged.
type IndexFunc func(obj Object) ([]string, error)

// Indexers maps index names to their IndexFunc, as client-go's
// cache.Indexers.
type Indexers map[string]IndexFunc

// Index names.
const (
	// NamespaceIndex indexes objects by metadata.namespace
	// (MetaNamespaceIndexFunc). Every informer has it; List uses it.
	NamespaceIndex = "namespace"
	// NodeNameIndex indexes pods by spec.nodeName (PodNodeNameIndexFunc),
	// as the kubelet's and scheduler's "spec.nodeName" field index.
	NodeNameIndex = "spec.nodeName"
)

// MetaNamespaceIndexFunc indexes an object by its namespace, as client-go's
// cache.MetaNamespaceIndexFunc (cluster-scoped objects under "").
func MetaNamespaceIndexFunc(obj Object) ([]string, error) { return []string{obj.GetNamespace()}, nil }

// PodNodeNameIndexFunc indexes a pod by spec.nodeName; a pod not bound to
// a node yet is not in the index. Other kinds are an error.
func PodNodeNameIndexFunc(obj Object) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("index %s: %T is not a *v1.Pod", NodeNameIndex, obj)
	}
	if pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// PodIndexers returns the indexes the controllers and the scheduler use on
// pods: NodeNameIndex.
func PodIndexers() Indexers { return Indexers{NodeNameIndex: PodNodeNameIndexFunc} }

// index maps an index value to the set of object keys under it.
type index map[string]map[string]struct{}

// AddIndexers adds indexes, built at once from the cached objects, so it
// may be called before or after Run (client-go's refuses once started).
// Adding a name again with the same function (the same func value, e.g.
// PodNodeNameIndexFunc) is a no-op, so every user of an index can add it;
// a name that exists with another function is an error and adds nothing.
func (i *Informer) AddIndexers(ix Indexers) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for name, f := range ix {
		if f == nil {
			return fmt.Errorf("store: informer of %s: index %q has no function", i.r.Plural, name)
		}
		if have, ok := i.indexers[name]; ok && reflect.ValueOf(have).Pointer() != reflect.ValueOf(f).Pointer() {
			return fmt.Errorf("store: informer of %s: index %q exists with another function", i.r.Plural, name)
		}
	}
	for name, f := range ix {
		if _, ok := i.indexers[name]; ok {
			continue
		}
		i.indexers[name] = f
		idx := index{}
		i.indices[name] = idx
		for k, o := range i.items {
			i.indexLocked(name, f, idx, k, o)
		}
	}
	return nil
}

// ByIndex returns the cached objects whose indexName function returned
// value, in no particular order (as client-go's Indexer.ByIndex). Do not
// modify them. An unknown index is an error.
func (i *Informer) ByIndex(indexName, value string) ([]Object, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	idx, ok := i.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("store: informer of %s has no index %q", i.r.Plural, indexName)
	}
	keys := idx[value]
	out := make([]Object, 0, len(keys))
	for k := range keys {
		out = append(out, i.items[k])
	}
	return out, nil
}

// ListIndexFuncValues returns the values indexName holds at least one
// object under, sorted (as client-go's Indexer.ListIndexFuncValues); nil
// for an unknown index.
func (i *Informer) ListIndexFuncValues(indexName string) []string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	idx := i.indices[indexName]
	out := make([]string, 0, len(idx))
	for v := range idx {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// putLocked stores o under k (replacing old, nil when absent) and updates
// every index. i.mu must be held for writing.
func (i *Informer) putLocked(k string, old, o Object) {
	if old != nil {
		i.unindexLocked(k, old)
	}
	i.items[k] = o
	for name, f := range i.indexers {
		i.indexLocked(name, f, i.indices[name], k, o)
	}
}

// removeLocked drops k (holding o) from the cache and every index. i.mu
// must be held for writing.
func (i *Informer) removeLocked(k string, o Object) {
	i.unindexLocked(k, o)
	delete(i.items, k)
}

func (i *Informer) indexLocked(name string, f IndexFunc, idx index, k string, o Object) {
	vals, err := f(o)
	if err != nil {
		slog.Error("informer: index function failed; object left out of the index", "resource", i.r.Plural, "index", name, "object", k, "err", err)
		return
	}
	for _, v := range vals {
		set := idx[v]
		if set == nil {
			set = map[string]struct{}{}
			idx[v] = set
		}
		set[k] = struct{}{}
	}
}

// unindexLocked removes k from the index values o had.
func (i *Informer) unindexLocked(k string, o Object) {
	for name, f := range i.indexers {
		vals, err := f(o)
		if err != nil {
			continue
		}
		idx := i.indices[name]
		for _, v := range vals {
			if set := idx[v]; set != nil {
				delete(set, k)
				if len(set) == 0 {
					delete(idx, v)
				}
			}
		}
	}
}
