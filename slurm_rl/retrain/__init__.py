"""Offline retraining from the SQL store: the logged window, a simulator scenario calibrated
on it, fine-tuning, the promotion gate, and the scheduled job (docs/retraining.md)."""
