"""The C-FLAG (Keshri, Shah, Prasad) room: reference.yaml (published numbers), claims.py, room.py (targets)."""
