"""The platform's services: the shared consumer runtime, the saga services, the sandboxes, the panel."""
