# GradMA (Luo et al., CVPR 2023): Tables 1–2, Figs. 1–7 and the claims at SCALE. Each target is
# `fedbench reproduce gradma <target>`; the targets (and the batched client executor at tiny, kept by the default
# `--executor auto`) are declared in fedbench/papers/gradma/room.py. Paper scale needs MNIST, CIFAR-10/100 and
# Tiny-ImageNet under --data-dir (docs/datasets.md; e.g. SWEEP_OPTS="--device cuda --data-dir /data/fl").
# Scenario files and every paper-silent choice: configs/gradma/README.md.

.PHONY: reproduce-gradma reproduce-gradma-runs reproduce-gradma-table1 reproduce-gradma-table2 reproduce-gradma-figures reproduce-gradma-fig5 reproduce-gradma-memory reproduce-gradma-claims

reproduce-gradma: install  ## everything of GradMA at SCALE
	$(REPRODUCE) gradma $(PAPER_OPTS)
reproduce-gradma-runs: install  ## Table 1's runs (14 columns × 16 methods × seeds), tuned per method and column: tables/gradma_tuning_$(SCALE).md
	$(REPRODUCE) gradma runs $(PAPER_OPTS)
reproduce-gradma-table1: install  ## GradMA Table 1 (top accuracy) at SCALE: paper / ours
	$(REPRODUCE) gradma table1 $(PAPER_OPTS)
reproduce-gradma-table2: install  ## GradMA Table 2 (rounds to ac, same runs) at SCALE: paper / ours
	$(REPRODUCE) gradma table2 $(PAPER_OPTS)
reproduce-gradma-figures: install  ## GradMA Figs. 1–4 (selected accuracy curves) in figures/
	$(REPRODUCE) gradma figures $(PAPER_OPTS)
reproduce-gradma-fig5: install  ## GradMA Figs. 5/21: GradMA-S over the (β1, β2) grid (top-accuracy tables, selected curves)
	$(REPRODUCE) gradma fig5 $(PAPER_OPTS)
reproduce-gradma-memory: install  ## GradMA Figs. 6–7: GradMA-S vs memory size m (top-accuracy tables and curves)
	$(REPRODUCE) gradma memory $(PAPER_OPTS)
reproduce-gradma-claims: install  ## GradMA claims on the SCALE runs and the paper's numbers: tables/gradma_claims_$(SCALE).md
	$(REPRODUCE) gradma claims $(PAPER_OPTS)
