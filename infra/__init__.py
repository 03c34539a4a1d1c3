"""Infrastructure: the native launcher, Kafka's broker runtime, Prometheus and Grafana provisioning."""
