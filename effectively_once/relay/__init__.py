"""The outbox relay: one process that publishes every service's outbox to Kafka, broker-confirmed."""
