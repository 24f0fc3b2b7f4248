package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/orca-edge/orca/runtimes/imagestore"
)

// ImagesPath is the apiserver route an image archive is PUT to, followed
// by the url-escaped reference.
const ImagesPath = "/apis/orca.dev/v1/images/"

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage container images in the cluster's image store",
	}
	cmd.AddCommand(newImagePushCommand(), newImageListCommand())
	return cmd
}

func newImagePushCommand() *cobra.Command {
	o := imagePushOptions{}
	cmd := &cobra.Command{
		Use:   "push ARCHIVE [--name REF]",
		Short: "Push an OCI image archive to the cluster's image store and print its reference and digest",
		Long: `Push an OCI image layout archive (a tar of oci-layout, index.json and
blobs/sha256/..., as written by ` + "`docker save`" + ` in OCI mode, ` + "`ctr images export`" + `,
BuildKit's oci exporter or examples/hello-container/mkimage) of one image to
the cluster's image store (the NATS Object Store bucket oci-images), under
REF, or under the name the archive gives its image. Nodes then run pods with
that image without any registry: they import it from the store by digest.
It prints the reference (normalized: hello:v1 is docker.io/library/hello:v1)
and the image's digest. On a terminal it shows the upload's progress.

By default the archive is PUT to the apiserver (--server; at most 2 GiB);
with --nats-url it is pushed straight into NATS.`,
		Example: `  orca image push bin/hello-container.tar
  orca image push app.tar --name registry.lan:5000/team/app:v2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.natsURL == "" {
				o.api, err = connect(cmd)
			} else {
				o.natsTLS, err = natsTLS(cmd)
			}
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "image reference to store it under, e.g. hello:v1 (default: the name in the archive)")
	f.StringVar(&o.natsURL, "nats-url", "", "push directly to this NATS server instead of the apiserver")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.StringVar(&o.progress, "progress", progressAuto, "show the upload's progress: auto (on a terminal), always or never")
	return cmd
}

func (o *imagePushOptions) run(ctx context.Context, out, errOut io.Writer, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > imagestore.MaxArchiveBytes {
		return fmt.Errorf("%s: %d bytes, the limit is %d", file, st.Size(), int64(imagestore.MaxArchiveBytes))
	}
	// Check it here first: a bad archive fails before any upload.
	_, archName, err := imagestore.Inspect(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	name := o.name
	if name == "" {
		if archName == "" {
			return fmt.Errorf("%s: the archive does not name its image: give --name", file)
		}
		name = archName
	}
	if name, err = imagestore.Normalize(name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	body, done, err := withProgress(f, st.Size(), "push "+name, errOut, o.progress)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var img imagestore.Image
	if o.natsURL != "" {
		img, err = pushImageNATS(ctx, o.natsURL, o.natsTLS, name, body)
	} else {
		img, err = pushImageHTTP(ctx, o.api, name, body, st.Size())
	}
	done()
	if err != nil {
		return fmt.Errorf("push %s as %s: %w", file, name, err)
	}
	fmt.Fprintf(out, "%s %s\n", img.Name, img.Digest)
	return nil
}

func pushImageNATS(ctx context.Context, natsURL string, tlsOpt nats.Option, name string, r io.Reader) (imagestore.Image, error) {
	nc, err := nats.Connect(natsURL, nats.Name("orca image push"), tlsOpt)
	if err != nil {
		return imagestore.Image{}, fmt.Errorf("connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return imagestore.Image{}, err
	}
	s, err := imagestore.New(ctx, js)
	if err != nil {
		return imagestore.Image{}, err
	}
	return s.Push(ctx, name, r)
}

// pushImageHTTP PUTs the archive to the apiserver; the answer is the
// ContainerImage, or a Kubernetes Status whose message is reported.
func pushImageHTTP(ctx context.Context, api *apiClient, name string, r io.Reader, size int64) (imagestore.Image, error) {
	u := strings.TrimRight(api.server, "/") + ImagesPath + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, r)
	if err != nil {
		return imagestore.Image{}, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("Accept", "application/json")
	resp, err := api.http.Do(req)
	if err != nil {
		return imagestore.Image{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return imagestore.Image{}, fmt.Errorf("PUT %s: read response: %w", u, err)
	}
	var reply struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Digest string `json:"digest"`
			Size   uint64 `json:"size"`
		} `json:"spec"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &reply)
	if resp.StatusCode/100 != 2 {
		msg := reply.Message
		if msg == "" {
			msg = strings.TrimSpace(string(b))
		}
		return imagestore.Image{}, fmt.Errorf("PUT %s: %s: %s", u, resp.Status, msg)
	}
	if !strings.HasPrefix(reply.Spec.Digest, "sha256:") {
		return imagestore.Image{}, fmt.Errorf("PUT %s: response %q carries no digest", u, b)
	}
	return imagestore.Image{Name: reply.Metadata.Name, Digest: reply.Spec.Digest, Size: reply.Spec.Size}, nil
}

// newImageListCommand returns `orca image ls`: the references in the
// cluster's image store, from GET /apis/orca.dev/v1/images.
func newImageListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the images in the cluster's image store",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listDigests(cmd, strings.TrimSuffix(ImagesPath, "/"), "images")
		},
	}
}
