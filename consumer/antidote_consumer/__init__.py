"""The data plane: a Spark Structured Streaming consumer that runs one user handler per
Kafka message and gives every message exactly one outcome under a PoisonPolicy.

One package, split by program:
- `driver/`: `antidote consumer`, the streaming driver: the source query and the retry pump
  (`consumer`), batches to committed outcomes and queue disabling (`batches`), the ledger,
  batch isolation, the driver's metrics and /healthz;
- `worker/`: the code that runs inside Spark's Python workers (`executor.process`, over
  Arrow batches) or in the driver for small retry batches (`local`): one message's pass
  through the handler (`attempts`), its time limit, handler loading, the message;
- `reader/`: `antidote reader|redrive|skip`: the poison-queue reader (`run`), its rules and
  filter, the Archive action, and skipping a Fault;
- `kafka/`: the Kafka plumbing they share: transactions, retries of transient errors,
  credentials, topics, the `antidote.*` headers;
- `spark`: Spark session set-up (driver and reader); `settings`: loading the effective
  settings. The contracts with the operator and the CLI are in `antidote_api`.
"""
