"""The poison-queue reader (`antidote reader`, `antidote redrive`, reader Jobs): `run` reads
the poison or dead-letter topic and redrives, archives, drops or holds each message under
`rules`; `archive` writes the Archive action's files; `skip` moves a consumer past a Fault."""
