"""Builders of the child objects a QueueConsumer owns, as pure functions (dicts in, dicts
out): `driver` (the driver's Deployment, Service, ConfigMap, RBAC and Spark auth Secret) and
`reader_job` (the poison reader's Job and ServiceAccount)."""
