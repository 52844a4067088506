# FedQVR / FedQVR-E (Wang et al.): Table I, Figs. 1–5 and the claims at SCALE. Each target is
# `fedbench reproduce fedqvr <target>` (finer ones: fig5_mnist_tau0.08, ...); the targets are declared in
# fedbench/papers/fedqvr/room.py. Scenario files and every paper-silent choice: configs/fedqvr/README.md.

.PHONY: reproduce-fedqvr reproduce-fedqvr-table1 reproduce-fedqvr-costs reproduce-fedqvr-figures reproduce-fedqvr-fig5 reproduce-fedqvr-claims

reproduce-fedqvr: install  ## everything of FedQVR at SCALE
	$(REPRODUCE) fedqvr $(PAPER_OPTS)
reproduce-fedqvr-table1: install  ## FedQVR Table I (ACC, #R, #C; CIFAR-10 and MNIST, ± HLU) at SCALE: paper / ours
	$(REPRODUCE) fedqvr table1 $(PAPER_OPTS)
reproduce-fedqvr-costs: install  ## FedQVR Table I's #C columns from the model sizes and the paper's #R (no training)
	$(REPRODUCE) fedqvr costs $(PAPER_OPTS)
reproduce-fedqvr-figures: install  ## FedQVR Figs. 1–4 (B and a sweeps, baselines, m = 5 / HLU) in figures/
	$(REPRODUCE) fedqvr figures $(PAPER_OPTS)
reproduce-fedqvr-fig5: install  ## FedQVR Fig. 5: FedQVR-E vs FedQVR and the quantized baselines under delay limits τ
	$(REPRODUCE) fedqvr fig5 $(PAPER_OPTS)
reproduce-fedqvr-claims: install  ## FedQVR claims on the SCALE runs and the paper's numbers: tables/fedqvr_claims_$(SCALE).md
	$(REPRODUCE) fedqvr claims $(PAPER_OPTS)
