"""The chaos panel: the platform's web face. For now it shows what runs and whether it answers."""
