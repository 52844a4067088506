"""The GradMA (Luo et al., CVPR 2023) room: reference.yaml (published numbers), claims.py, room.py (targets)."""
