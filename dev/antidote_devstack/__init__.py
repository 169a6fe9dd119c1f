"""The embedded local stack: a real kube-apiserver + etcd and a real Kafka broker, built
from the Go module proxy and Maven Central, for development, tests and the demo.

Never used in a real cluster.
"""
