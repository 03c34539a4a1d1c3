"""The inventory service: reserves stock for placed orders, releases it when payment fails."""
