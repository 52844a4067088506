"""Optimizers on flat parameter vectors: the server's (:mod:`.server`, settings in :mod:`.spec`)
and the clients' local step (:mod:`.local`). Importing this package does not import torch."""
