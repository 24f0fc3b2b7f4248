// Command grpchealth is the node agent's test workload for gRPC probes: a
// grpc.health.v1 Health server on :$PORT (default 50051) where the
// service "" and the services listed in $SERVING (comma-separated,
// default "orca") answer SERVING and those in $NOT_SERVING answer
// NOT_SERVING; any other service is NOT_FOUND, as grpc-go's health
// server answers. It is built into a container image by the tests.
package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "50051"
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(1)
	}
	hs := health.NewServer() // "" is SERVING
	serving := os.Getenv("SERVING")
	if serving == "" {
		serving = "orca"
	}
	for _, s := range strings.Split(serving, ",") {
		hs.SetServingStatus(s, healthpb.HealthCheckResponse_SERVING)
	}
	for _, s := range strings.Split(os.Getenv("NOT_SERVING"), ",") {
		if s != "" {
			hs.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	fmt.Println("grpchealth: serving on", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "grpchealth:", err)
		os.Exit(1)
	}
}
