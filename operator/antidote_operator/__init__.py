"""The Antidote operator: thin Kopf handlers (`handlers`, started by `main`) around pure
decisions. `context` holds what handlers share (Options, Context, the Syncer); `reconcile`
syncs one QueueConsumer: it observes (`observations`, `state`, the metrics `watcher`), asks
`status.decide` (one function per condition) and applies the children `builders/` render
(`driver`, `reader_job`); `reader_jobs` decides when a poison-reader Job starts and
`reader_control` starts it. `child_runner` is the one hook for what runs children where no
kubelet does (the local stack's dev runner, dev/antidote_devrunner, passed in by the CLI);
`peering` and `metrics` are the operator's own. Run it with `antidote operator` (docs/operator.md)."""
