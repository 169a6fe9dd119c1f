"""The on-call commands, `antidote inspect|resume|drain|redrive <consumer>` (also the kubectl
plugin): `commands` (the commands and their parser), `cluster` (the Kubernetes side),
`quarantine` (reading quarantined records with the consumer's header parsing and the
reader's filter), `table` (what they print)."""
