"""The FedAMS / FedCAMS (Wang, Lin, Chen, ICML 2022) room: reference.yaml (published numbers), claims.py, room.py (targets)."""
