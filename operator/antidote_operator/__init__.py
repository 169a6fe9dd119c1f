"""The Antidote operator: Kopf handlers reconciling QueueConsumers into Spark consumers
(`builders`, `reconcile`, `status`), the metrics watcher (`watcher`), the local-stack dev
runner (`devrunner`) and the operator's own metrics (`metrics`). Run it with `antidote
operator` (see docs/operator.md)."""
