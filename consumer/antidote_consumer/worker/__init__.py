"""Code that runs where the handler runs: in Spark's Python workers (`executor.process`, the
mapInArrow function) or in the driver for small retry batches (`local`). Nothing here talks
to the driver's state; results travel back as rows."""
