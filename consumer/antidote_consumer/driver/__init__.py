"""`antidote consumer`: the streaming driver. `consumer.Consumer` runs the source query and
the retry pump; `batches.Runtime` turns each batch into committed outcomes and disables the
queue when it must; `ledger` is its transactional record of both."""
