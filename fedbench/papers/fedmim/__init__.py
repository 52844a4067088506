"""The FedMIM (Liu et al.) room: reference.yaml (published numbers), claims.py, room.py (targets)."""
