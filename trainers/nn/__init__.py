"""trainers.nn."""
