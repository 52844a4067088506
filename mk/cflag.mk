# C-FLAG (Keshri, Shah, Prasad): continual FL, Tables 2, 3, 7, 8, accuracy matrices, Figs. 2–6 and the claims at
# SCALE. Each target is `fedbench reproduce cflag <target>`; the targets (scenario files, report steps) are declared
# in fedbench/papers/cflag/room.py. Scenario files and every paper-silent choice: configs/cflag/README.md.

.PHONY: reproduce-cflag reproduce-cflag-table2 reproduce-cflag-table3 reproduce-cflag-table7 reproduce-cflag-table8 reproduce-cflag-figures reproduce-cflag-ablations reproduce-cflag-claims

reproduce-cflag: install  ## everything of C-FLAG at SCALE (the claims last: C11, C12 read the figures' runs)
	$(REPRODUCE) cflag $(PAPER_OPTS)
reproduce-cflag-table2: install  ## C-FLAG Table 2 (non-IID, task-incremental) at SCALE: paper / ours
	$(REPRODUCE) cflag table2 $(PAPER_OPTS)
reproduce-cflag-table3: install  ## C-FLAG Table 3 (IID, task-incremental) at SCALE: paper / ours
	$(REPRODUCE) cflag table3 $(PAPER_OPTS)
reproduce-cflag-table7: install  ## C-FLAG Table 7 (both, mean ± std) from the same runs
	$(REPRODUCE) cflag table7 $(PAPER_OPTS)
reproduce-cflag-table8: install  ## C-FLAG Table 8 (class-incremental) at SCALE: paper / ours
	$(REPRODUCE) cflag table8 $(PAPER_OPTS)
reproduce-cflag-figures: install  ## C-FLAG Figs. 2–4: per-task accuracy curves, ζ = 1 (Fig. 3), Γ(t) per round (Fig. 4)
	$(REPRODUCE) cflag figures $(PAPER_OPTS)
reproduce-cflag-ablations: install  ## C-FLAG Figs. 5–6 (sweeps): clients, memory per task, local epochs
	$(REPRODUCE) cflag ablations $(PAPER_OPTS)
reproduce-cflag-claims: install  ## C-FLAG claims on the SCALE runs and the paper's numbers: tables/cflag_claims_$(SCALE).md
	$(REPRODUCE) cflag claims $(PAPER_OPTS)
