"""The engine: data and model setup, the shared round loop, local training, checkpoints."""
