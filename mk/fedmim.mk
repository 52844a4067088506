# FedMIM (Liu et al.): Tables I–III and Fig. 2 at SCALE. Each target is `fedbench reproduce fedmim <target>`; the
# targets are declared in fedbench/papers/fedmim/room.py. Scenario files and every decision the paper leaves open:
# configs/fedmim/README.md.

.PHONY: reproduce-fedmim reproduce-fedmim-table1 reproduce-fedmim-table2 reproduce-fedmim-table3 reproduce-fedmim-fig2

reproduce-fedmim: install  ## everything of FedMIM at SCALE
	$(REPRODUCE) fedmim $(PAPER_OPTS)
reproduce-fedmim-table1: install  ## FedMIM Table I (3 datasets × IID/DIR.3/DIR.1) at SCALE: paper / ours, claims
	$(REPRODUCE) fedmim table1 $(PAPER_OPTS)
reproduce-fedmim-table2: install  ## FedMIM Table II (3 datasets × E = 1, 5, 10) at SCALE: paper / ours, claims
	$(REPRODUCE) fedmim table2 $(PAPER_OPTS)
reproduce-fedmim-table3: install  ## FedMIM Table III (α/β ablation) at SCALE: paper / ours, claims
	$(REPRODUCE) fedmim table3 $(PAPER_OPTS)
reproduce-fedmim-fig2: install  ## FedMIM Fig. 2: (a) accuracy at 5%/20% participation, (b) local consistency (Table I DIR.3 runs)
	$(REPRODUCE) fedmim fig2 $(PAPER_OPTS)
