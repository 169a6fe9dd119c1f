"""`antidote demo`: the whole story on the embedded stack."""
