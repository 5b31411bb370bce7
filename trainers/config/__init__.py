"""trainers.config."""
