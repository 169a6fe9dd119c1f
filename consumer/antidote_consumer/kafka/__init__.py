"""Kafka plumbing shared by the driver, the workers and the reader: transactional writes,
retries of transient errors, credentials (Secrets), topics, and the `antidote.*` headers
(their names are in `antidote_api.headers`)."""
