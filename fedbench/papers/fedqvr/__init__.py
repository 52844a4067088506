"""The FedQVR / FedQVR-E (Wang et al.) room: reference.yaml (published numbers), claims.py, room.py (targets)."""
