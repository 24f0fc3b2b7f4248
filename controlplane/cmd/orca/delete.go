package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// newDeleteCmd returns `orca delete -f FILE`: delete each object of a
// manifest with foreground propagation (a Deployment goes once its
// ReplicaSets and pods are gone, as `kubectl delete --cascade=foreground`)
// and, with --wait, poll until every object is gone.
func newDeleteCmd() *cobra.Command {
	var file, namespace string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "delete -f FILE",
		Short: "Delete the objects of a Kubernetes manifest, their dependents first (a kubectl-free subset of kubectl delete)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			return deleteManifest(cmd.Context(), cmd.OutOrStdout(), api, file, namespace, wait)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest file ('-' for stdin)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "namespace for objects that name none")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long until the objects are gone (0: do not wait)")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func deleteManifest(ctx context.Context, out io.Writer, api *apiClient, file, namespace string, wait time.Duration) error {
	var items, whats []string
	res := newResolver(api)
	err := eachObject(file, func(u *unstructured.Unstructured) error {
		coll, err := res.resourcePath(u, namespace)
		if err != nil {
			return err
		}
		item := coll + "/" + url.PathEscape(u.GetName())
		what := strings.ToLower(u.GetKind()) + "/" + u.GetName()
		code, err := do(api, http.MethodDelete, item, map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}, nil)
		if err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		switch {
		case code == http.StatusNotFound:
			fmt.Fprintf(out, "%s not found\n", what)
		case code/100 == 2:
			fmt.Fprintf(out, "%s deleted\n", what)
			items, whats = append(items, item), append(whats, what)
		default:
			return fmt.Errorf("delete %s: HTTP %d", what, code)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for i, item := range items {
		for {
			code, err := do(api, http.MethodGet, item, nil, nil)
			if err == nil && code == http.StatusNotFound {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s still exists after %v", whats[i], wait)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
