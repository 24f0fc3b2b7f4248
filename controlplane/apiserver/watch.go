package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/store"
)

// maxWatchTimeoutSeconds caps timeoutSeconds (a year) so that it cannot
// overflow a time.Duration.
const maxWatchTimeoutSeconds = 365 * 24 * 3600

// watchEvent is one line of a watch stream: {"type":"ADDED","object":{...}}.
type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object any             `json:"object"`
}

// watch streams changes as newline-separated JSON watch events, flushed
// one by one, as the Kubernetes apiserver does for ?watch=true and the
// legacy /watch/ paths. resourceVersion "" or "0" starts with an ADDED
// event per existing object; a later one resumes after it, and one the
// store no longer keeps yields a single ERROR event carrying a 410 Status
// (client-go relists then). timeoutSeconds ends the stream normally.
// With selectors, an object that stops matching is sent as DELETED and
// one that starts matching as ADDED. BOOKMARK events are sent only with
// allowWatchBookmarks=true: one after the initial events (with the
// "k8s.io/initial-events-end" annotation when sendInitialEvents=true), then
// one at the current resourceVersion every minute
// (store.Config.WatchBookmarkInterval). With a Table Accept header each
// event carries a one-row meta.k8s.io Table, column definitions in the
// first only.
func (s *Server) watch(c echo.Context, ri reqInfo, opts metainternalversion.ListOptions, sel selector) error {
	rv, err := store.ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if t := opts.TimeoutSeconds; t != nil {
		if *t < 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds %d must be a non-negative integer", *t))
		}
		if *t > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(min(*t, maxWatchTimeoutSeconds))*time.Second)
			defer cancel()
		}
	}
	// Which events come first (Kubernetes' watch semantics): with
	// sendInitialEvents=true the state not older than resourceVersion as
	// ADDED events, then a bookmark; without it, resourceVersion "" or "0"
	// sends the current state and a later one resumes after it; with
	// sendInitialEvents=false and no resourceVersion only changes from now.
	initial := rv == 0
	if opts.SendInitialEvents != nil {
		initial = *opts.SendInitialEvents
	}
	from := rv
	switch {
	case initial:
		if err := s.st.WaitRevision(ctx, ri.res, rv); err != nil {
			return err
		}
		// As a list: after the store's watch cache has applied every
		// write acknowledged so far.
		if _, err := s.st.WaitFresh(ctx, ri.res); err != nil {
			return err
		}
		from = 0
	case rv == 0:
		latest, err := s.st.WaitFresh(ctx, ri.res)
		if err != nil {
			return err
		}
		from = latest
	}
	// A resourceVersion the store no longer keeps events after is not an
	// error here: the watch's only event is an ERROR with a 410 Status,
	// sent after the 200 as Kubernetes does.
	w, err := s.st.WatchEvents(ctx, ri.res, ri.namespace, from)
	if err != nil {
		return err
	}
	defer w.Stop()
	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, "application/json")
	resp.Header().Set("Cache-Control", "no-cache, private")
	resp.WriteHeader(http.StatusOK)
	resp.Flush()
	enc := json.NewEncoder(resp)
	tableWanted, tableVersion := wantsTable(c)
	includeObject := c.QueryParam("includeObject")
	bookmarks := opts.AllowWatchBookmarks
	initialEnd := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	matched := map[string]bool{} // last known selector result per object key
	firstTable := true
	var line []byte
	send := func(t watch.EventType, ev store.Event) error {
		obj := ev.Object.(store.Object)
		if tableWanted {
			tb := s.table(ri.kind, []store.Object{obj}, obj.GetResourceVersion(), tableVersion, includeObject)
			if !firstTable {
				tb.ColumnDefinitions = nil
			}
			firstTable = false
			if err := enc.Encode(watchEvent{Type: t, Object: tb}); err != nil {
				return err
			}
			resp.Flush()
			return nil
		}
		// The object's JSON is encoded once for every watcher; the line
		// is what enc.Encode(watchEvent{...}) writes.
		data, err := ev.JSON()
		if err != nil {
			return err
		}
		line = append(append(append(append(line[:0], `{"type":`...), strconv.Quote(string(t))...), `,"object":`...), data...)
		line = append(line, "}\n"...)
		if _, err := resp.Write(line); err != nil {
			return err
		}
		resp.Flush()
		return nil
	}
	for {
		var ev store.Event
		var ok bool
		select {
		case ev, ok = <-w.Events():
		case <-ctx.Done():
			return nil
		}
		if !ok {
			return nil // the store ended the watch; the client resumes
		}
		switch ev.Type {
		case watch.Error:
			var out any = ev.Object
			if st, ok := ev.Object.(*metav1.Status); ok {
				out = statusOf(&apierrors.StatusError{ErrStatus: *st}) // with kind and apiVersion, as clients decode it
			}
			_ = enc.Encode(watchEvent{Type: watch.Error, Object: out})
			resp.Flush()
			return nil
		case watch.Bookmark:
			if !bookmarks {
				continue
			}
			var bm store.Object = ri.res.New()
			o, _ := ev.Object.(store.Object)
			if o != nil {
				bm.SetResourceVersion(o.GetResourceVersion())
			}
			// The store's bookmarks: the end of the initial events
			// (annotated), then progress once a minute.
			if initialEnd && o != nil && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			}
			bm.GetObjectKind().SetGroupVersionKind(ri.res.GroupVersion().WithKind(ri.res.Kind))
			if err := enc.Encode(watchEvent{Type: watch.Bookmark, Object: bm}); err != nil {
				return nil
			}
			resp.Flush()
			continue
		}
		obj, ok := ev.Object.(store.Object)
		if !ok {
			continue
		}
		t := ev.Type
		if !sel.empty() {
			key := store.KeyOf(obj)
			m := sel.matches(obj)
			prev, known := matched[key]
			if !known {
				// Not sent by this watch yet (a resumed watch): judge
				// by the object's state before the change, so one that
				// stops matching still gets its DELETED (and one that
				// starts, its ADDED), as Kubernetes' cacher does.
				if p := ev.Prev(); p != nil {
					prev, known = sel.matches(p), true
				}
			}
			matched[key] = m
			switch t {
			case watch.Added:
				if !m {
					continue
				}
			case watch.Modified:
				switch {
				case known && prev && !m:
					t = watch.Deleted
				case known && !prev && m:
					t = watch.Added
				case !m:
					continue
				}
			case watch.Deleted:
				delete(matched, key)
				if !(known && prev) && !(!known && m) {
					continue
				}
			}
		}
		if err := send(t, ev); err != nil {
			return nil
		}
	}
}
