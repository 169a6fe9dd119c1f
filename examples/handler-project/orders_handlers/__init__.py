"""A team's handlers: copy examples/handler-project/ and rename the package."""
