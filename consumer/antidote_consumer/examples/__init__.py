"""Example handlers that ship with the consumer image (the demo uses them)."""
