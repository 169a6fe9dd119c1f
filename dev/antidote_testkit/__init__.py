"""What the integration tests and the benchmarks both drive the real components with, as
`kopf.testing` is to Kopf's users: the operator as a process (`operators`), a consumer
in-process or as a process and its settings (`consumers`), and reading and writing Kafka
topics (`kafka_io`). Dev tooling (dev/): in no image. Tests and benchmarks import it; it
imports neither."""
