package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
)

// newWaitCmd returns `orca wait`: wait until the apiserver answers, or
// until N pods matching a selector are Ready.
func newWaitCmd() *cobra.Command {
	var (
		selector, namespace string
		count               int
		timeout             time.Duration
		server              bool
	)
	cmd := &cobra.Command{
		Use:   "wait (--server-ready | --selector app=x --count N)",
		Short: "Wait until the apiserver is ready, or N pods matching a selector are Ready",
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			check := func() (bool, string) { return readyz(api) }
			if !server {
				check = func() (bool, string) { return podsReady(api, namespace, selector, count) }
			}
			var last string
			quietUntil := time.Now().Add(time.Second) // a server just started needs a moment
			for {
				ok, msg := check()
				if ok {
					fmt.Fprintln(cmd.OutOrStdout(), msg)
					return nil
				}
				if msg != last && time.Now().After(quietUntil) {
					fmt.Fprintln(cmd.ErrOrStderr(), "  waiting:", msg)
					last = msg
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("timed out after %v: %s", timeout, msg)
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	f := cmd.Flags()
	f.BoolVar(&server, "server-ready", false, "wait for the apiserver's /readyz")
	f.StringVarP(&selector, "selector", "l", "", "label selector of the pods")
	f.StringVarP(&namespace, "namespace", "n", "default", "namespace of the pods")
	f.IntVar(&count, "count", 1, "number of Ready pods to wait for")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

func readyz(api *apiClient) (bool, string) {
	resp, err := api.http.Get(api.server + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("apiserver %s: %s", api.server, resp.Status)
}

func podsReady(api *apiClient, namespace, selector string, count int) (bool, string) {
	var list corev1.PodList
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods?labelSelector=" + url.QueryEscape(selector)
	if _, err := doOK(api, http.MethodGet, path, nil, &list); err != nil {
		return false, err.Error()
	}
	ready := 0
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				ready++
			}
		}
	}
	return ready >= count, fmt.Sprintf("%d/%d pods with %q Ready", ready, count, selector)
}
