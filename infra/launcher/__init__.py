"""The native launcher: runs PostgreSQL, Kafka and the platform's processes without Docker."""
