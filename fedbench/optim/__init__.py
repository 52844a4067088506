"""Optimizers on flat parameter vectors, all in one transform shape (:mod:`.transform`: ``init(x)``,
``update(moments, state, lr)``, composed with ``chain``): the server's (:mod:`.server`, settings in
:mod:`.spec`) and the clients' local step (:mod:`.local`). Importing this package does not import torch."""
