"""The `antidote` command line (also installed as the kubectl plugin `kubectl-antidote`)."""
