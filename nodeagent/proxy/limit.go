package proxy

// fdsPerConn is the most file descriptors one proxied TCP connection
// holds: the client's and the endpoint's sockets, and, while a direction
// is bulk (splice, see relay), a pipe of two descriptors per direction.
// A UDP flow holds one.
const fdsPerConn = 6

// DefaultMaxConnections returns the cap on a proxy's concurrent TCP
// connections and UDP flows (Config.MaxConnections, orca-agent
// --proxy-max-connections) derived from the process's file descriptor
// limit n (RLIMIT_NOFILE, soft; Go raises it to the hard limit at start):
// the agent keeps max(n/8, min(1024, n/2)) descriptors for its own work
// (NATS, DNS, probes, pods, metrics) and the proxy gets the rest at
// fdsPerConn (6) per connection, at least 16. n = 20,000 gives 2,916;
// n = 1,048,576 gives 152,917; where the limit cannot be read, 10,000.
func DefaultMaxConnections() int {
	n, ok := nofile()
	if !ok {
		return 10000
	}
	return maxConnectionsFor(n)
}

func maxConnectionsFor(n uint64) int {
	reserve := max(n/8, min(1024, n/2))
	c := int((n - reserve) / fdsPerConn)
	return max(c, 16)
}
