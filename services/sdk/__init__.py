"""Runtime SDK (R16): appends over Kafka, run start and prepare over HTTP."""
