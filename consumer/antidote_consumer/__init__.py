"""The data plane: a Spark Structured Streaming consumer that runs one user handler per
Kafka message and gives every message exactly one outcome under a PoisonPolicy."""
